from .stall_phase_hook import StallPhaseHook
from .unused_params_hook import UnusedParamsHook

__all__ = ['UnusedParamsHook', 'StallPhaseHook']
