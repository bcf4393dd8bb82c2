# The plugin codebase's config with the BEV codebases' sampler keys: their train module
# passes them to the plugin's own build_dataloader (mmdet3d_plugin/datasets/builder.py),
# which builds the training sampler from shuffler_sampler with the plugin's registry
# (nonshuffler_sampler: for loaders built with shuffle=False). data.train_dataloader's
# shuffle=False (from the base) is mmdet's key, which their train modules do not read.
_base_ = ['./plugin_tiny_retinanet_branch.py']
data = dict(shuffler_sampler=dict(type='DistributedGroupSampler'),
            nonshuffler_sampler=dict(type='DistributedSampler'))
