"""Export a trained model to other runtimes (Hugging Face transformers, CTranslate2)."""
