"""What the user asked the guard to do about unused parameters, read from what they wrote.

Both frameworks' users write ``find_unused_parameters`` (``'auto'``, True or False): under
MMEngine in ``model_wrapper_cfg``, as GuardedDDP's argument or at the config's top level,
under mmcv 1.x at the config's top level only. :func:`read_request` checks the value, refuses
two places that disagree, and says where the request came from (the decision names it).
"""
from typing import Tuple, Union

from .config_lines import ConfigLines

AUTO = 'auto'

_SENTINEL = object()

#: Source of a request written as the config's top-level ``find_unused_parameters``.
CONFIG_TOP_LEVEL = 'config top-level find_unused_parameters'


def not_given():
    """Default of GuardedDDP's ``find_unused_parameters``: "the user did not write it"."""
    return _SENTINEL


def read_request(wrapper_value, config_value=_SENTINEL, built_by_runner: bool = True, *,
                 lines: ConfigLines) -> Tuple[Union[str, bool], str]:
    """What the user asked for, and where they wrote it: ``(requested, source)``.

    ``model_wrapper_cfg=dict(type='GuardedDDP', find_unused_parameters=...)`` (or the
    argument, when GuardedDDP is built in Python) and the top-level
    ``find_unused_parameters = ...`` of the config (which MMEngine drops when
    ``model_wrapper_cfg`` is set) are both honoured; when both are written and disagree the
    run does not start, since either choice would silently ignore one of them. ``lines``:
    the words of the framework whose config is read (mmcv 1.x has the top-level key only).
    """
    wrapper_option = (f'{lines.runner_option}.find_unused_parameters', '') if built_by_runner \
        else ('find_unused_parameters', f' (argument of {lines.wrapper})')
    for (option, where), value in ((wrapper_option, wrapper_value),
                                   (('find_unused_parameters', ' (config top level)'),
                                    config_value)):
        if value is _SENTINEL:
            continue
        if isinstance(value, str):
            if value != AUTO:
                raise ValueError(
                    f'{lines.wrapper}: {option}={value!r}{where} is not a known mode. Use '
                    "'auto' (let the guard choose), True (DDP graph search) or False (DDP "
                    'fast path, fail clearly on unused parameters).')
        elif not isinstance(value, bool):
            raise TypeError(
                f'{lines.wrapper}: {option}{where} must be \'auto\', True or False, not '
                f'{type(value).__name__} {value!r}. Write e.g. {lines.mode("auto")}')
    if wrapper_value is not _SENTINEL and config_value is not _SENTINEL \
            and wrapper_value != config_value:
        raise ValueError(
            f'{lines.wrapper}: the config sets find_unused_parameters twice with different '
            f'values: {config_value!r} at the top level and {wrapper_value!r} in '
            f'{lines.runner_option}. Delete one of the two lines (the top-level one usually '
            f"comes from an inherited mmdet3d config; 'auto' lets {lines.wrapper} choose).")
    if wrapper_value is not _SENTINEL:
        if built_by_runner:
            return wrapper_value, lines.runner_option
        return wrapper_value, (f'{lines.wrapper}(find_unused_parameters={wrapper_value!r}) '
                               'in Python')
    if config_value is not _SENTINEL:
        return config_value, CONFIG_TOP_LEVEL
    return AUTO, 'default'
