"""The lines a message tells the user to write, in the words of the framework they train with.

A fix that names the other framework's key does nothing: ``model_wrapper_cfg`` is read by
MMEngine's Runner only, while mmcv 1.x's training scripts read the config's top-level
``find_unused_parameters`` and build ``MMDistributedDataParallel`` themselves (the guard
reaches that class through the ``custom_imports`` line, and its options are the config's
``ddp_guard = dict(...)``). Every message of the core takes the :class:`ConfigLines` of the
adapter that built the wrapper, so that each names the wrapper the user has and a line that
works where they paste it. Each framework's are a field of its row in
:mod:`mmdet3d_ddp_guard.environment.framework_table`.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigLines:
    """One framework's words for the guard.

    Attributes:
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
        where (str): Where the user writes these lines (``in your config``).
        find_the_branch (str): How to find which batches take a branch that holds a
            collective (the stall guard's fix).
        plain_norm (str): A norm layer without a collective, as the user writes it.
        runner_option (str): Where the wrapper's own options are written when the
            framework's runner builds it (``model_wrapper_cfg``); empty where no runner
            builds it from options.
        report (str): What writes the per-iteration report, as its user names it (the
            report's messages start with it).
        accumulation_option (str): The option that sets gradient accumulation, where the
            guard reads it from the framework; empty elsewhere.
    """
    wrapper: str
    guard: str
    mode_template: str
    mode_over_false: str
    option_template: str
    static_graph_fix: str
    let_the_guard_choose: str
    own_wrapper: str
    where: str
    find_the_branch: str
    plain_norm: str
    report: str
    runner_option: str = ''
    accumulation_option: str = ''

    def mode(self, value) -> str:
        """The line that asks for ``find_unused_parameters=value``."""
        return self.mode_template.format(value=repr(value))

    def option(self, option: str, value) -> str:
        """The line that sets the guard's option ``option`` to ``value``."""
        return self.option_template.format(option=option, value=repr(value))
