"""A codebase-shaped tree (``projects/mmdet3d_plugin`` + ``train.py``) written for the tests,
laid out the way BEVFormer, UniAD and StreamPETR lay theirs out."""
