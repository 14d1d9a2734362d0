"""WhisperPipeline (speech recognition) for genai_shim."""
