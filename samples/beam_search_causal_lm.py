#!/usr/bin/env python3
# Port of openvino.genai samples/python/text_generation/beam_search_causal_lm.py for ov-npu-emu.
# Differs from upstream only in the import line; the device stays "CPU" (the real NPU pipeline
# rejects beam search).

import argparse
import genai_shim as openvino_genai


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('model_dir')
    parser.add_argument('prompts', nargs='+')
    args = parser.parse_args()

    device = 'CPU'  # NPU does not support beam search
    pipe = openvino_genai.LLMPipeline(args.model_dir, device)

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 20
    config.num_beam_groups = 3
    config.num_beams = 15
    config.diversity_penalty = 1
    config.num_return_sequences = config.num_beams

    beams = pipe.generate(args.prompts, config)
    print(beams)


if '__main__' == __name__:
    main()
