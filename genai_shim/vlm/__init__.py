"""Visual language pipelines (openvino.genai's visual_language/)."""
