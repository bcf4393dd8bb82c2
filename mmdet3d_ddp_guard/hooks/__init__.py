from .unused_params_hook import UnusedParamsHook

__all__ = ['UnusedParamsHook']
