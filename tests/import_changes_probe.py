"""What ``import mmdet3d_ddp_guard`` changes outside the package, found in a fresh process
(``python -m tests.import_changes_probe``; read by tests/test_import_changes.py).

It loads the frameworks that are installed (torch, MMEngine, mmcv, mmdet, mmdet3d) and every
module that importing the package loads (a first process lists them), so that nothing the
package touches is first loaded by the package; then it snapshots every module-level name of
every loaded module, the ``__dict__`` of every class those modules hold, the contents of
every registry they hold (MMEngine's and mmcv 1.x's ``Registry``), torch's weights-only
allowlist (``torch.serialization.get_safe_globals()``, torch >= 2.4), the environment
variables, the number of ``atexit`` handlers, the operators of torch's dispatcher
(``torch.ops``) and the threads' names; imports the package;
and prints, as JSON, every difference that is not the package's own modules or a module
loaded since:

- ``changes``: ``{"name", "kind", "detail", "registry", "covered_by"}``: ``name`` the
  changed object's dotted name (``module.name``, ``module.Class.name``, a registry's
  ``module.NAME``, ``torch.serialization`` for the allowlist, ``os.environ``, ``atexit``,
  ``torch.ops``, ``threading``), ``kind`` one of added, removed, replaced, registered,
  allowlist, environment, atexit, operators, threads; ``registry`` the registry's own name (``model``,
  ``hook``...) for a registration, with the keys in ``detail``; ``covered_by``, for each
  labelled list of names given with ``--listed`` (a JSON object; the README's) and for
  ``import_changes`` (the loaded adapters' ``import_changes.CHANGED``), the name that covers
  the change, or null. A name covers a change when it resolves, in this process, to the
  same attribute of the same object (any alias: the README says
  ``mmcv.parallel.MMDistributedDataParallel.__new__`` for the class that
  ``mmcv.parallel.distributed`` defines), to the registry, or to ``torch.serialization``
  for the allowlist; and a covered rebinding covers the others that put the same new
  object in place of the same old one (a function replaced in the module that defines it
  and where other modules imported it by name).
- ``loaded_by_the_import``: the modules, not the package's own, that the import loads in a
  process where the frameworks were loaded first (``torch._dynamo`` was one: loading it
  sets environment variables, registers ``atexit`` handlers, adds operators and replaces
  ``torch.manual_seed``; the snapshot above, taken after loading them, would not see that).
- ``frameworks``: which of mmengine, mmcv, mmdet, mmdet3d were loaded.

Then it applies changes that the package does not make (a module-level function of
torch.distributed replaced, a class attribute added to torch's DDP, a toy registered in the
root model registry, an environment variable set, an ``atexit`` handler) and compares again, to show that the comparison names each:
``changes_with_extra_patches``, and ``extra_patches``, the names they are found by.
"""
import argparse
import atexit
import importlib
import json
import os
import subprocess
import sys
import threading
import types
from typing import Tuple

PACKAGE = 'mmdet3d_ddp_guard'

#: Loaded first where installed; import failures are ignored (an mmdet3d without its ops).
FRAMEWORKS = ('torch', 'mmengine', 'mmengine.runner', 'mmcv', 'mmcv.parallel', 'mmcv.runner',
              'mmdet', 'mmdet.apis', 'mmdet3d', 'mmdet3d.apis')

#: Names that change in modules whatever is imported: what ``warnings`` records of a warning.
ALWAYS_CHANGING = frozenset({'__warningregistry__'})


def _own(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + '.') or name.startswith('tests.') \
        or name in ('tests', '__main__')


def _import_quietly(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001  (not installed, or an install without its ops)
        pass


def modules_the_package_loads() -> Tuple[list, list]:
    """The modules, not the package's own, that ``import mmdet3d_ddp_guard`` leaves loaded
    in a fresh process, in the order they were loaded; and those of them that the
    frameworks, loaded first, had not loaded (what the import itself loads)."""
    output = subprocess.run(
        [sys.executable, '-c',
         'import importlib, json, sys\n'
         f'for name in {FRAMEWORKS!r}:\n'
         '    try:\n'
         '        importlib.import_module(name)\n'
         '    except Exception:\n'
         '        pass\n'
         'before = list(sys.modules)\n'
         f'import {PACKAGE}\n'
         'print(json.dumps([before, list(sys.modules)]))'],
        check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    before, after = json.loads(output.splitlines()[-1])
    loaded = [name for name in after if not _own(name)]
    return loaded, [name for name in loaded if name not in set(before)]


def _is_registry(value) -> bool:
    cls = type(value)
    return cls.__name__ == 'Registry' and cls.__module__.split('.')[0] in ('mmengine', 'mmcv') \
        and isinstance(getattr(value, '_module_dict', None), dict)


def _operators():
    """The names of the operators registered with torch's dispatcher (``torch.ops``)."""
    torch_c = getattr(sys.modules.get('torch'), '_C', None)
    names = getattr(torch_c, '_dispatch_get_all_op_names', None)
    return None if names is None else set(names())


def _atexit_handlers():
    """How many ``atexit`` handlers are registered (CPython's count)."""
    count = getattr(atexit, '_ncallbacks', None)
    return None if count is None else count()


def _safe_globals():
    serialization = sys.modules.get('torch.serialization')
    get_safe_globals = getattr(serialization, 'get_safe_globals', None)
    return None if get_safe_globals is None else set(get_safe_globals())


class Snapshot:
    """Module-level names, class ``__dict__`` entries, registries and torch's allowlist."""

    def __init__(self):
        self.modules = {}  # name -> (module, dict copy)
        self.classes = {}  # id -> (dotted name, class, dict copy)
        self.registries = {}  # id -> (dotted name, registry, module_dict copy)
        for name, module in list(sys.modules.items()):
            if not isinstance(module, types.ModuleType) or _own(name):
                continue
            namespace = dict(vars(module))
            self.modules[name] = (module, namespace)
            for attr, value in namespace.items():
                # type(), not isinstance(): some objects warn when their attributes are
                # read (torch.distributed.reduce_op). Every class a module holds, under the
                # name of the module that defines it (compiled ones included).
                if issubclass(type(value), type):
                    if id(value) not in self.classes:
                        dotted = f'{value.__module__}.{value.__qualname__}'
                        self.classes[id(value)] = (dotted, value, dict(vars(value)))
                elif _is_registry(value):
                    # Named by its shortest path: mmengine.registry.MODELS, not .root.
                    dotted = f'{name}.{attr}'
                    known = self.registries.get(id(value))
                    if known is None or len(dotted) < len(known[0]):
                        self.registries[id(value)] = (dotted, value, dict(value._module_dict))
        self.safe_globals = _safe_globals()
        self.environ = dict(os.environ)
        self.atexit_handlers = _atexit_handlers()
        self.operators = _operators()
        self.threads = {thread.name for thread in threading.enumerate()}


class Change:
    """One difference: ``owner`` is the object whose attribute ``attr`` changed (None: the
    owner itself, a registry or torch.serialization)."""

    def __init__(self, name, kind, owner, attr, old=None, new=None, detail=''):
        self.name, self.kind, self.owner, self.attr = name, kind, owner, attr
        self.old, self.new, self.detail = old, new, detail

    def as_dict(self, covered_by: dict) -> dict:
        return dict(name=self.name, kind=self.kind, detail=self.detail,
                    registry=self.owner.name if self.kind == 'registered' else None,
                    covered_by=covered_by)


def _namespace_changes(prefix, owner, before: dict, after: dict, loaded_before) -> list:
    changes = []
    missing = object()
    for attr in sorted(set(before) | set(after)):
        if attr in ALWAYS_CHANGING:
            continue
        old, new = before.get(attr, missing), after.get(attr, missing)
        if old is new:
            continue
        # A submodule imported since is bound on its package: loading, not a change.
        if old is missing and issubclass(type(new), types.ModuleType) \
                and new.__name__ not in loaded_before:
            continue
        kind = 'added' if old is missing else 'removed' if new is missing else 'replaced'
        changes.append(Change(f'{prefix}.{attr}', kind, owner, attr,
                              None if old is missing else old,
                              None if new is missing else new))
    return changes


def compare(before: Snapshot) -> list:
    """Every difference between ``before`` and now, in what ``before`` held."""
    loaded_before = set(before.modules)
    changes = []
    for name, (module, namespace) in before.modules.items():
        changes += _namespace_changes(name, module, namespace, dict(vars(module)),
                                      loaded_before)
    for dotted, cls, namespace in before.classes.values():
        changes += _namespace_changes(dotted, cls, namespace, dict(vars(cls)), loaded_before)
    for dotted, registry, entries in before.registries.values():
        now = dict(registry._module_dict)
        keys = sorted(key for key in set(entries) | set(now)
                      if entries.get(key) is not now.get(key))
        if keys:
            changes.append(Change(dotted, 'registered', registry, None,
                                  detail=f'{registry.name}: {", ".join(keys)}'))
    after_globals = _safe_globals()
    if after_globals != before.safe_globals:
        changes.append(Change('torch.serialization', 'allowlist',
                              sys.modules['torch.serialization'], None,
                              detail='torch.serialization.get_safe_globals()'))
    environ = dict(os.environ)
    keys = sorted(key for key in set(environ) | set(before.environ)
                  if environ.get(key) != before.environ.get(key))
    if keys:
        changes.append(Change('os.environ', 'environment', os, 'environ',
                              detail=', '.join(keys)))
    if _atexit_handlers() != before.atexit_handlers:
        changes.append(Change('atexit', 'atexit', atexit, None,
                              detail=f'{before.atexit_handlers} -> {_atexit_handlers()} '
                              'handlers'))
    operators = _operators()
    if operators != before.operators:
        added = sorted(operators - before.operators)
        changes.append(Change('torch.ops', 'operators', sys.modules['torch'].ops, None,
                              detail=f'{len(added)} added: {", ".join(added[:5])}'))
    threads = sorted({thread.name for thread in threading.enumerate()} - before.threads)
    if threads:
        changes.append(Change('threading', 'threads', threading, None,
                              detail=', '.join(threads)))
    return changes


_MISSING = object()


def _attribute(owner, name: str, default=_MISSING):
    """``getattr``, but a module's own namespace only: a module's ``__getattr__`` may import
    what it names (torch loads ``torch._dynamo`` so), which a name in a list must not."""
    if isinstance(owner, types.ModuleType):
        value = vars(owner).get(name, default)
    else:
        value = getattr(owner, name, default)
    if value is _MISSING:
        raise AttributeError(name)
    return value


def resolve(dotted: str):
    """``(owner, attribute)`` that a listed dotted name points at now, where its attribute
    is the last name (``attribute`` None for a module, or for a name that is not there)."""
    parts = dotted.split('.')
    for split in range(len(parts), 0, -1):
        module = sys.modules.get('.'.join(parts[:split]))
        if module is None:
            continue
        owner, rest = module, parts[split:]
        if not rest:
            return module, None
        try:
            for part in rest[:-1]:
                owner = _attribute(owner, part)
        except AttributeError:
            return None, None
        value = _attribute(owner, rest[-1], None)
        if _is_registry(value) or isinstance(value, types.ModuleType):
            return value, None
        return owner, rest[-1]
    return None, None


def covering_names(changes: list, listed) -> list:
    """For each change, the name of ``listed`` that covers it (see the module), or None."""
    targets = {}
    for dotted in listed:
        owner, attr = resolve(dotted)
        if owner is not None:
            targets.setdefault((id(owner), attr), dotted)
    names = [targets.get((id(change.owner), change.attr)) for change in changes]
    covered = [(change, name) for change, name in zip(changes, names)
               if name and change.old is not None]
    for index, change in enumerate(changes):
        if names[index] is None and change.old is not None:
            names[index] = next((name for other, name in covered
                                 if other.old is change.old and other.new is change.new), None)
    return names


def _import_changes_lists() -> list:
    """The names that the loaded adapters' ``import_changes.CHANGED`` list."""
    names = []
    for adapter in ('openmmlab2', 'openmmlab1'):
        module = sys.modules.get(f'{PACKAGE}.{adapter}.import_changes')
        names += list(getattr(module, 'CHANGED', ()))
    return names


def apply_extra_patches() -> dict:
    """Changes the package does not make (see the module); the name each is found by."""
    import torch
    import torch.distributed as dist
    barrier = dist.barrier
    dist.barrier = lambda *args, **kwargs: barrier(*args, **kwargs)
    torch.nn.parallel.DistributedDataParallel.ddp_guard_probe = True
    os.environ['DDP_GUARD_PROBE'] = '1'
    atexit.register(os.getpid)
    patches = dict(environment='DDP_GUARD_PROBE',
                   function='torch.distributed.barrier',
                   class_attribute='torch.nn.parallel.distributed.DistributedDataParallel.'
                   'ddp_guard_probe')
    # A registry where a framework holds one (torch alone has none).
    if 'mmengine' in sys.modules:
        from mmengine.registry import MODELS
    elif 'mmcv' in sys.modules:
        from mmcv.cnn import MODELS
    else:
        return patches
    MODELS.register_module(name='DDPGuardProbe', module=torch.nn.Linear)
    return dict(patches, registration='DDPGuardProbe')


def _report(changes: list, listed: dict) -> list:
    covering = {label: covering_names(changes, names) for label, names in listed.items()}
    return [change.as_dict({label: covering[label][index] for label in covering})
            for index, change in enumerate(changes)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--listed', default='{}',
                        help='JSON object: a label for each list of dotted names')
    args = parser.parse_args(argv)
    loaded, loaded_by_the_import = modules_the_package_loads()
    for name in FRAMEWORKS + tuple(loaded):
        _import_quietly(name)
    before = Snapshot()
    importlib.import_module(PACKAGE)
    listed = dict(json.loads(args.listed), import_changes=_import_changes_lists())
    changes = _report(compare(before), listed)
    extra_patches = apply_extra_patches()
    print(json.dumps(dict(
        changes=changes,
        loaded_by_the_import=loaded_by_the_import,
        extra_patches=extra_patches,
        changes_with_extra_patches=_report(compare(before), listed),
        frameworks=sorted(name for name in ('mmengine', 'mmcv', 'mmdet', 'mmdet3d')
                          if name in sys.modules))))


if __name__ == '__main__':
    main()
