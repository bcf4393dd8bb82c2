# The short run of the mmdet3d example configs: 4 iterations at the schedule's base learning
# rate, a log line and the hook's names every iteration, no validation or test.
#
# Every mmdet3d config already sets these keys, and MMEngine refuses two bases that set the
# same key, so they travel under one key, `tiny_run`, and the example config applies them
# after its bases, popping the key so that the final config holds them once:
#     _base_ = ['mmdet3d::...', '../_base_/ddp_guard.py', '../_base_/schedules/tiny_run.py']
#     globals().update(_base_.pop('tiny_run'))
tiny_run = dict(
    train_cfg=dict(_delete_=True, type='IterBasedTrainLoop', max_iters=4),
    param_scheduler=[dict(type='ConstantLR', factor=1.0, by_epoch=False)],
    val_dataloader=None,
    val_cfg=None,
    val_evaluator=None,
    test_dataloader=None,
    test_cfg=None,
    test_evaluator=None,
    default_hooks=dict(
        logger=dict(type='LoggerHook', interval=1),
        checkpoint=dict(type='CheckpointHook', interval=1000, by_epoch=False)),
    log_processor=dict(by_epoch=False),
    custom_hooks=[dict(type='UnusedParamsHook', interval=1)],
    randomness=dict(seed=0),
    load_from=None)
