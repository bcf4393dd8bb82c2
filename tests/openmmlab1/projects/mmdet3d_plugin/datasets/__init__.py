"""The plugin's data package, laid out as BEVFormer's and UniAD's
``projects/mmdet3d_plugin/datasets/``: its own ``builder.build_dataloader`` and samplers."""
