#!/usr/bin/env python3
# Port of openvino.genai samples/python/text_generation/chat_sample.py for ov-npu-emu.
# Differs from upstream only in the import line and the default device ("NPU").

import argparse
import genai_shim as openvino_genai


def streamer(subword):
    print(subword, end="", flush=True)
    # The returned status tells the pipeline whether to go on.
    return openvino_genai.StreamingStatus.RUNNING


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", help="Path to the model directory")
    parser.add_argument("device", nargs="?", default="NPU", help="Device to run the model on (default: NPU)")
    parser.add_argument('--system_prompt', type=str, default=None,
                        help='Optional system prompt to set the LLM persona/instructions')
    args = parser.parse_args()

    device = args.device
    pipe = openvino_genai.LLMPipeline(args.model_dir, device)

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 100

    chat_history = openvino_genai.ChatHistory()
    if args.system_prompt:
        chat_history.append({"role": "system", "content": args.system_prompt})
    while True:
        try:
            prompt = input("question:\n")
        except EOFError:
            break
        chat_history.append({"role": "user", "content": prompt})
        decoded_results: openvino_genai.DecodedResults = pipe.generate(chat_history, config, streamer)
        chat_history.append({"role": "assistant", "content": decoded_results.texts[0]})
        print("\n----------")


if "__main__" == __name__:
    main()
