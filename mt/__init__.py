"""mt: an end-to-end machine-translation training pipeline (sentencepiece + Transformer + sacreBLEU)."""

__version__ = "0.1.0"
