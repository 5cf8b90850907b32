"""Dense optimizers ``train.optimizer`` can name: AdamATan2 and AdamW (adam), Lion (lion, on
the optional ``lion-pytorch`` package)."""
