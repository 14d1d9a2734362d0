#!/usr/bin/env python3
# Speculative decoding (FastDraft) sample for ov-npu-emu, following openvino.genai's
# samples/python/text_generation/speculative_decoding_lm.py; runs unchanged under the real library
# except for the import line.
#
#   python speculative_decoding_lm.py MAIN_MODEL_DIR DRAFT_MODEL_DIR "Once upon a time"
#
# The draft must share the main model's tokenizer.  Greedy only: the answer is the main model's
# own greedy answer, produced in fewer main-model calls when the draft guesses well.

import argparse
import genai_shim as openvino_genai


def streamer(subword):
    print(subword, end='', flush=True)
    return openvino_genai.StreamingStatus.RUNNING


def print_model_metrics(title, metrics, accepted=None):
    print(title)
    print(f'  Generate time: {metrics.get_generate_duration().mean:.2f} ms')
    print(f'  TTFT: {metrics.get_ttft().mean:.2f} ms')
    print(f'  TTST: {metrics.get_ttst().mean:.2f} ms')
    print(f'  TPOT: {metrics.get_tpot().mean:.2f} ± {metrics.get_tpot().std:.2f} ms/token')
    print(f'  Num generated tokens: {metrics.get_num_generated_tokens()}')
    print(f'  Model calls: {len(metrics.raw_metrics.m_durations)}')
    if accepted is not None:
        print(f'  Num accepted draft tokens: {accepted}')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('model_dir')
    parser.add_argument('draft_model_dir')
    parser.add_argument('prompt')
    args = parser.parse_args()

    # The main model on NPU (compiled for several tokens per call), the draft on CPU.
    main_device = 'NPU'
    draft_device = 'CPU'

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 100
    # Candidates per step: the stateful (NPU) pipeline starts here and adapts (+2 after a fully
    # accepted step, -1 otherwise, at most twice this value).  assistant_confidence_threshold is
    # for continuous batching only.
    config.num_assistant_tokens = 4

    draft = openvino_genai.draft_model(args.draft_model_dir, draft_device)
    pipe = openvino_genai.LLMPipeline(args.model_dir, main_device, draft_model=draft)

    res = pipe.generate([args.prompt], config, streamer)
    print()
    metrics = res.extended_perf_metrics
    if metrics:
        print_model_metrics('MAIN MODEL', metrics.main_model_metrics,
                            metrics.get_num_accepted_tokens())
        print_model_metrics('DRAFT MODEL', metrics.draft_model_metrics)


if '__main__' == __name__:
    main()
