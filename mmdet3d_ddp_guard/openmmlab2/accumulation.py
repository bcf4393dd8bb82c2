"""MMEngine's gradient accumulation as the config writes it (``accumulative_counts``), and
what a run under DDP's own graph search with it is told before torch 2.4
(pytorch/pytorch#69031): GuardedDDP's decision and UnusedParamsHook read it from the Runner.
"""


#: What a run under DDP's own graph search with gradient accumulation before torch 2.4 is
#: told (UnusedParamsHook, under any wrapper but GuardedDDP).
ACCUMULATION_BUG_UNGUARDED = (
    'this run trains with DDP find_unused_parameters=True and accumulative_counts={counts} '
    'on torch {torch_version}: DDP does not synchronise a parameter used in an earlier '
    'micro-step of the window but not in the last one (pytorch/pytorch#69031, fixed in torch '
    '2.4), so the ranks may silently train different weights. Fix: '
    "model_wrapper_cfg = dict(type='GuardedDDP'), which trains it right, or torch >= 2.4.")


def configured_accumulation(runner) -> int:
    """The largest ``accumulative_counts`` in the Runner's ``optim_wrapper`` config (also
    inside an ``OptimWrapperDict``'s wrappers); 1 without a Runner."""
    if runner is None:
        return 1
    counts = []

    def collect(cfg):
        if isinstance(cfg, dict):
            counts.append(cfg.get('accumulative_counts', 1))
            for value in cfg.values():
                collect(value)

    collect(runner.cfg.get('optim_wrapper'))
    return max(counts, default=1)
