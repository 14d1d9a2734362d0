"""What a VLMPipeline remembers about a ChatHistory between generate() calls.

The real (visual_language/vlm_chat_context.cpp) keeps, per ChatHistory object, each message it has
seen with its normalized text and the images the user gave with it: the next call finds how many
leading messages are unchanged, forgets the rest (the history was edited), registers the call's
images with the last user message and normalizes only the new messages.  The images stay with
the history, so a later turn without images still sees the earlier ones; a cancelled turn is
forgotten again.  The pipeline itself never changes the ChatHistory.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

from genai_shim.chat import ChatHistory
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["HistoryTurn", "VisionChatMemory", "multipart_text"]


@dataclasses.dataclass
class _Message:
    original: dict[str, Any]
    normalized: str
    images: int  # how many images the user gave with this message
    videos: int = 0  # and videos
    #: the images / videos its tags name, in prompt order (universal tags may reorder or repeat)
    used_images: list[Any] = dataclasses.field(default_factory=list)
    used_videos: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _State:
    messages: list[_Message] = dataclasses.field(default_factory=list)
    images: list[Any] = dataclasses.field(default_factory=list)
    videos: list[Any] = dataclasses.field(default_factory=list)
    multipart: bool | None = None  # the history's format, fixed by its first call (the real's)

    def truncate(self, n: int) -> None:
        self.messages = self.messages[:n]
        self.images = self.images[:sum(m.images for m in self.messages)]
        self.videos = self.videos[:sum(m.videos for m in self.messages)]


@dataclasses.dataclass
class HistoryTurn:
    """One generate(ChatHistory) call: the normalized history to template, every image and video
    it refers to in order, and how to forget the turn if the streamer cancels it."""

    history: ChatHistory
    images: list[Any]
    rollback: Callable[[], None]
    videos: list[Any] = dataclasses.field(default_factory=list)


def _is_multipart(message: dict[str, Any]) -> bool:
    """The real's detect_chat_history_format on the last user message: string content, or a list
    with a text, image or video part; anything else is its error."""
    if "content" not in message:
        raise UserInputError("Unknown chat history format: user message does not contain 'content' field.")
    content = message["content"]
    if isinstance(content, str):
        return False
    if isinstance(content, list) and any(
            isinstance(p, dict) and (p.get("type") in ("image", "video")
                                     or (p.get("type") == "text" and isinstance(p.get("text"), str)))
            for p in content):
        return True
    raise UserInputError(
        "Unknown chat history format. Supported formats schemas are `{role: user, content: string}` and "
        "`{role: user, content: [{type: text/image/video, ...}, ...]}`.")


def multipart_text(parts: list[Any], images_before: int, videos_before: int) -> str:
    """A multipart user message as the real's multipart_message_to_string: text parts as they
    are, each ``{"type": "image"}`` part the universal tag of the next image given with the
    message (numbered after the chat's earlier ones), ``video`` likewise; parts that are not
    typed dicts are skipped, an unknown type is the real's error."""
    out: list[str] = []
    image, video = images_before, videos_before
    for part in parts:
        if not isinstance(part, dict) or "type" not in part:
            continue
        kind = part["type"]
        if kind == "text":
            out.append(str(part.get("text", "")))
        elif kind == "image":
            out.append(f"<ov_genai_image_{image}>")
            image += 1
        elif kind == "video":
            out.append(f"<ov_genai_video_{video}>")
            video += 1
        else:
            raise UserInputError(f"Unsupported content type in multipart message: {kind}")
    return "".join(out)


class VisionChatMemory:
    """Per-ChatHistory state (held weakly: it goes with the history object)."""

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[ChatHistory, _State] = weakref.WeakKeyDictionary()

    def turn(self, history: ChatHistory, new_images: list[Any],
             normalize: Callable[[str, list[Any], list[Any], int, int], tuple[str, list[Any], list[Any]]],
             new_videos: list[Any] | None = None) -> HistoryTurn:
        """``normalize(content, images, videos, images before, videos before)`` gives the message's
        normalized text and the images / videos its tags name, in order."""
        messages = history.get_messages()
        if not messages:
            raise UserInputError("Chat history cannot be empty")
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            raise UserInputError("Chat history has no user message to answer")
        state = self._states.setdefault(history, _State())
        multipart = _is_multipart(messages[users[-1]])
        if state.multipart is not None and state.multipart != multipart:
            raise UserInputError("Mixed chat history formats detected.")
        state.multipart = multipart
        match = 0
        while match < min(len(state.messages), len(messages)) and state.messages[match].original == messages[match]:
            match += 1
        state.truncate(match)
        for i in range(match, len(messages)):
            message = messages[i]
            content = message.get("content")
            if multipart and message.get("role") == "user" and isinstance(content, list):
                content = multipart_text(content, len(state.images), len(state.videos))
            if not isinstance(content, str):
                raise ConfigError(
                    "genai_shim's VLMPipeline takes ChatHistory message content as a string, or for a user "
                    f"message a list of parts; message {i} has {type(content).__name__} content", key="content")
            if message.get("role") != "user":
                state.messages.append(_Message(message, content, 0))
                continue
            given = new_images if i == users[-1] else []
            clips = (new_videos or []) if i == users[-1] else []
            text, used, used_clips = normalize(content, given, clips, len(state.images), len(state.videos))
            state.messages.append(_Message(message, text, len(given), len(clips), used, used_clips))
            state.images.extend(given)
            state.videos.extend(clips)
        normalized = ChatHistory([{**m.original, "content": m.normalized} for m in state.messages])
        normalized.set_tools(history.get_tools())
        normalized.set_extra_context(history.get_extra_context())
        return HistoryTurn(normalized, [im for m in state.messages for im in m.used_images],
                           lambda: state.truncate(match), [v for m in state.messages for v in m.used_videos])
