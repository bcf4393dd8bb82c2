"""The warning a guarded wrapper logs when it takes the process's one stall guard over."""
from .config_lines import ConfigLines


def stall_guard_moved(lines: ConfigLines, earlier_model: str, model: str) -> str:
    """``model``'s new wrapper took the stall guard from the live one around
    ``earlier_model`` (the class names of the wrapped models)."""
    return (f'{lines.wrapper} (around {model}): the stall guard moves to this wrapper. A '
            f'process has one, and the {lines.wrapper} built before it (around '
            f'{earlier_model}), still alive and not stopped, is no longer watched for hangs. '
            'The newest wrapper is the one that trains in a sweep or a notebook; if the '
            f'earlier one is, build this one with {lines.option("stall_timeout", None)} and '
            'the stall guard stays where it was.')
