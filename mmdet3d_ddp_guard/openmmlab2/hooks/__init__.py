"""The MMEngine adapter's hooks, registered in MMEngine's ``HOOKS`` on import: the report
(:class:`UnusedParamsHook`) and the stall guard's phases (:class:`StallPhaseHook`)."""
from .stall_phase_hook import StallPhaseHook
from .unused_params_hook import UnusedParamsHook

__all__ = ['UnusedParamsHook', 'StallPhaseHook']
