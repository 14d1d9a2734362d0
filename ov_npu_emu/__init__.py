"""ov_npu_emu: an OpenVINO-compatible runtime that emulates Intel's NPU LLM stack."""
