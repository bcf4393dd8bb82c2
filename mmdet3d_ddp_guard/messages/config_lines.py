"""The lines a message tells the user to write, in the words of the framework they train with.

A fix that names the other framework's key does nothing: ``model_wrapper_cfg`` is read by
MMEngine's Runner only, while mmcv 1.x's training scripts read the config's top-level
``find_unused_parameters`` and build ``MMDistributedDataParallel`` themselves (the guard
reaches that class through the ``custom_imports`` line, and its options are the config's
``ddp_guard = dict(...)``). Every message of the core takes the :class:`ConfigLines` of the
adapter that built the wrapper, so that each names the wrapper the user has and a line that
works where they paste it.
"""
from dataclasses import dataclass

from .framework_names import MMCV1, MMENGINE


@dataclass(frozen=True)
class ConfigLines:
    """One framework's words for the guard.

    Attributes:
        framework (str): ``MMENGINE`` or ``MMCV1`` (:mod:`.framework_names`).
        wrapper (str): The guarded wrapper as the user knows it, first word of its messages.
        guard (str): The config line that puts the guard on a run.
        mode_template (str): The line that sets ``find_unused_parameters``; ``{value}``.
        mode_over_false (str): What to do with a ``find_unused_parameters = False`` the
            config already has, for that line to count.
        option_template (str): The line that sets one of the guard's own options
            (``stall_timeout``); ``{option}`` and ``{value}``.
        static_graph_fix (str): How to stop asking for DDP's static graph.
        let_the_guard_choose (str): How to let the guard choose where the training
            script (not the config's top level) asked for DDP's graph search.
        own_wrapper (str): The framework's own DDP wrapper, the one the guard replaces.
    """
    framework: str
    wrapper: str
    guard: str
    mode_template: str
    mode_over_false: str
    option_template: str
    static_graph_fix: str
    let_the_guard_choose: str
    own_wrapper: str

    def mode(self, value) -> str:
        """The line that asks for ``find_unused_parameters=value``."""
        return self.mode_template.format(value=repr(value))

    def option(self, option: str, value) -> str:
        """The line that sets the guard's option ``option`` to ``value``."""
        return self.option_template.format(option=option, value=repr(value))


MMENGINE_LINES = ConfigLines(
    framework=MMENGINE,
    wrapper='GuardedDDP',
    guard="model_wrapper_cfg = dict(type='GuardedDDP')",
    mode_template="model_wrapper_cfg = dict(type='GuardedDDP', find_unused_parameters={value})",
    # GuardedDDP refuses a top-level value that disagrees with model_wrapper_cfg's.
    mode_over_false='and delete any top-level `find_unused_parameters = False`',
    option_template="model_wrapper_cfg = dict(type='GuardedDDP', {option}={value})",
    static_graph_fix=("remove static_graph=True from model_wrapper_cfg and let GuardedDDP "
                      "choose: model_wrapper_cfg = dict(type='GuardedDDP')"),
    let_the_guard_choose="Remove it (or write 'auto') to let GuardedDDP choose.",
    own_wrapper="MMEngine's MMDistributedDataParallel")

# The training scripts pass cfg.get('find_unused_parameters', False) to mmcv's DDP, and the
# guard reads the same key: a line at the end of the config also overrides an inherited one.
MMCV1_LINES = ConfigLines(
    framework=MMCV1,
    wrapper='MMDistributedDataParallel (guarded by mmdet3d_ddp_guard)',
    guard=("custom_imports = dict(imports=['mmdet3d_ddp_guard'], "
           'allow_failed_imports=False)'),
    mode_template='find_unused_parameters = {value}',
    mode_over_false=('in place of `find_unused_parameters = False` (written in your config, '
                     'it also overrides the False of a _base_ config)'),
    option_template='ddp_guard = dict({option}={value})',
    static_graph_fix=('remove static_graph=True (or _set_static_graph()) from the training '
                      "script's MMDistributedDataParallel(...) and let the guard choose (the "
                      'custom_imports line is all it needs)'),
    # The script passed True itself: what the config writes wins over it.
    let_the_guard_choose=("To let the guard choose, add this line to your config: "
                          "find_unused_parameters='auto'."),
    own_wrapper="mmcv's MMDistributedDataParallel")

LINES = {MMENGINE: MMENGINE_LINES, MMCV1: MMCV1_LINES}
