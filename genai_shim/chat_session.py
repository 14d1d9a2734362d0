"""The running chat of an LLMPipeline (start_chat() .. finish_chat()): its messages, which input
kind it was started with, and the rules for a turn that fails or is cancelled."""

from __future__ import annotations

import warnings
from typing import Any

from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["CHAT_DEPRECATION", "ChatSession", "require_template"]

CHAT_DEPRECATION = (
    "start_chat() / finish_chat() API is deprecated and will be removed in the next major release. "
    "Please use generate() with ChatHistory argument."
)


def require_template(tokenizer: Any) -> None:
    if not tokenizer.chat_template:
        raise ConfigError("Chat template must not be empty when using ChatHistory in generate method.")


class ChatSession:
    def __init__(self) -> None:
        self.active = False
        self.history: list[dict[str, Any]] = []
        self.input_kind: str | None = None  # "string", "history" or "encoded" for the running chat
        #: an encoded-inputs chat: every input's and answer's token ids so far (the real's
        #: m_tokenized_chat_history)
        self.tokens: list[int] = []

    def start(self, system_message: str = "") -> None:
        warnings.warn(CHAT_DEPRECATION, DeprecationWarning, stacklevel=3)
        self.active = True
        self.input_kind = None
        self.tokens = []
        self.history = [{"role": "system", "content": system_message}] if system_message else []

    def finish(self) -> None:
        warnings.warn(CHAT_DEPRECATION, DeprecationWarning, stacklevel=3)
        self.active = False
        self.input_kind = None
        self.tokens = []
        self.history = []

    def claim(self, kind: str) -> None:
        """A chat keeps the input kind it started with (the real's texts)."""
        if kind == "encoded":
            if self.input_kind not in (None, "encoded"):
                raise UserInputError(
                    "Chat doesn't support switching between input types. Please, continue using "
                    "StringInputs or restart the chat.")
            self.input_kind = kind
            return
        if self.input_kind == "encoded":
            name = "StringInputs" if kind == "string" else "ChatHistory"
            raise UserInputError(
                f"Chat doesn't support switching between input types. Please, continue using {name} or "
                "restart the chat.")
        other = {"string": "history", "history": "string"}[kind]
        if self.input_kind == other:
            name = "StringInputs" if other == "string" else "ChatHistory"
            raise UserInputError(
                "Chat doesn't support switching between input types. Please, continue using "
                f"{name} or restart the chat."
            )
        if kind == "string":
            self.input_kind = kind

    def user_turn(self, prompt: str) -> list[dict[str, Any]]:
        self.history.append({"role": "user", "content": prompt})
        return self.history

    def drop_user_turn(self) -> None:
        """A failed or cancelled turn leaves no trace in the history."""
        self.history.pop()

    def answer(self, text: str) -> None:
        self.history.append({"role": "assistant", "content": text})
