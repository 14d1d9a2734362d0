#!/usr/bin/env python3
# Port of openvino.genai samples/python/rag/text_embeddings.py for ov-npu-emu.
# Differs from upstream only in the import line.

import argparse
import genai_shim as openvino_genai


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("texts", nargs="+")
    args = parser.parse_args()

    device = "CPU"  # GPU can be used as well

    config = openvino_genai.TextEmbeddingPipeline.Config()
    config.pooling_type = openvino_genai.TextEmbeddingPipeline.PoolingType.MEAN

    pipeline = openvino_genai.TextEmbeddingPipeline(args.model_dir, device, config)

    text_embeddings = pipeline.embed_documents(args.texts)
    query_embeddings = pipeline.embed_query("What is the capital of France?")


if "__main__" == __name__:
    main()
