# tiny_retinanet_branch.py with find_unused_parameters written as True.
_base_ = ['./tiny_retinanet_branch.py']
find_unused_parameters = True
