from .mmdet_train import custom_train_detector  # noqa: F401
