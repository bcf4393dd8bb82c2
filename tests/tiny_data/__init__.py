"""Writers of the tiny datasets the zoo rows train on (benchmarks/zoo.py,
tests/test_zoo_rows.py): KITTI with cameras, nuScenes with cameras, Lyft, Waymo, SUN RGB-D."""
