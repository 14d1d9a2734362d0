#!/usr/bin/env python3
# Port of openvino.genai samples/python/text_generation/multinomial_causal_lm.py for ov-npu-emu.
# Differs from upstream only in the import line and the device ("NPU").

import argparse
import genai_shim as openvino_genai
import queue
import threading
from typing import Union


class IterableStreamer(openvino_genai.StreamerBase):
    """Detokenizes incrementally and hands complete pieces of text to whoever iterates over it.

    The newest tokens are held back (a later token can change how earlier ones decode), text that
    ends in an incomplete UTF-8 character is never emitted, and a newline flushes the buffer.
    """

    HOLD_BACK = 3  # tokens

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer
        self.tokens_cache = []
        self.decoded_lengths = []  # per cache position: text length, -1 incomplete, -2 not decoded
        self.print_len = 0
        self.text_queue = queue.Queue()

    def __iter__(self):
        return self

    def __next__(self):
        word = self.text_queue.get()  # blocks until the generation thread puts something
        if word is None:
            raise StopIteration
        return word

    def get_stop_flag(self):
        return openvino_genai.StreamingStatus.RUNNING

    def write_word(self, word: str):
        self.text_queue.put(word)

    def _length_at(self, position: int) -> int:
        if self.decoded_lengths[position] == -2:
            text = self.tokenizer.decode(self.tokens_cache[:position + 1])
            self.decoded_lengths[position] = -1 if text.endswith(chr(65533)) else len(text)
        return self.decoded_lengths[position]

    def write(self, token: Union[int, list[int]]) -> openvino_genai.StreamingStatus:
        tokens = token if isinstance(token, list) else [token]
        self.tokens_cache.extend(tokens)
        self.decoded_lengths.extend([-2] * (len(tokens) - 1))
        text = self.tokenizer.decode(self.tokens_cache)
        self.decoded_lengths.append(len(text))

        word = ""
        if len(text) > self.print_len and text.endswith("\n"):
            word = text[self.print_len:]
            self.tokens_cache, self.decoded_lengths, self.print_len = [], [], 0
        elif text.endswith(chr(65533)):
            self.decoded_lengths[-1] = -1
        elif len(self.tokens_cache) >= self.HOLD_BACK:
            until = self._length_at(len(self.decoded_lengths) - self.HOLD_BACK)
            if until != -1 and until > self.print_len:
                word = text[self.print_len:until]
                self.print_len = until
        self.write_word(word)

        status = self.get_stop_flag()
        if status != openvino_genai.StreamingStatus.RUNNING:
            self.end()  # a stop requested here is not followed by the pipeline's end()
        return status

    def end(self):
        text = self.tokenizer.decode(self.tokens_cache)
        if len(text) > self.print_len:
            self.write_word(text[self.print_len:])
            self.tokens_cache, self.print_len = [], 0
        self.text_queue.put(None)


class ChunkStreamer(IterableStreamer):
    """Decodes only on every `tokens_len`-th token, to save detokenizer calls."""

    def __init__(self, tokenizer, tokens_len):
        super().__init__(tokenizer)
        self.tokens_len = tokens_len

    def write(self, token: Union[int, list[int]]) -> openvino_genai.StreamingStatus:
        if (len(self.tokens_cache) + 1) % self.tokens_len == 0:
            return super().write(token)
        tokens = token if isinstance(token, list) else [token]
        self.tokens_cache.extend(tokens)
        self.decoded_lengths.extend([-2] * len(tokens))
        return openvino_genai.StreamingStatus.RUNNING


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("prompt")
    args = parser.parse_args()

    device = "NPU"  # CPU can be used as well
    tokens_len = 10  # chunk size
    pipe = openvino_genai.LLMPipeline(args.model_dir, device)

    text_print_streamer = ChunkStreamer(pipe.get_tokenizer(), tokens_len)

    def token_printer():
        # Iterating blocks until the streamer queues the next piece of text.
        for word in text_print_streamer:
            print(word, end="", flush=True)

    printer_thread = threading.Thread(target=token_printer, daemon=True)
    printer_thread.start()

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 100
    config.do_sample = True
    config.top_p = 0.9
    config.top_k = 30

    # The streamer prints text while tokens are generated.
    pipe.generate(args.prompt, config, text_print_streamer)
    printer_thread.join()


if "__main__" == __name__:
    main()
