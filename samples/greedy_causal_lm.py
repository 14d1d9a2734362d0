#!/usr/bin/env python3
# Port of openvino.genai samples/python/text_generation/greedy_causal_lm.py for ov-npu-emu.
# Differs from upstream only in the import line and the device ("NPU").

import argparse
import genai_shim as openvino_genai


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('model_dir')
    parser.add_argument('prompt')
    args = parser.parse_args()

    device = 'NPU'  # CPU can be used as well
    pipe = openvino_genai.LLMPipeline(args.model_dir, device)

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 100

    print(pipe.generate(args.prompt, config))


if '__main__' == __name__:
    main()
