"""The demo (``make demo``): its driver (``python -m demo``), the CenterPoint custom layer
it trains, the tiny nuScenes and KITTI writers and the torchrun launcher. Not installed."""
