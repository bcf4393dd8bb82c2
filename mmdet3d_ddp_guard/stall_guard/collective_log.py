"""Every collective this rank issues, in order, per process group: the stall guard's evidence.

Ranks pair collectives by order within a group, on every backend: gloo and NCCL alike match
this rank's n-th collective with every other rank's n-th. So a hang that no flag fixes (a
SyncBN in a branch some ranks skip, a loss term reduced on some ranks only) shows as two
ranks whose n-th collectives differ, or as a rank that went on past an iteration without the
collective another rank issued in it. That holds wherever the host thread happens to block,
which on NCCL is the first operation that needs a device result, not the collective.

What is recorded, and how:

- the Python-level collectives of ``torch.distributed``, every one the torch at hand has
  (:mod:`.collective_functions` reads them from ``distributed_c10d``: all_reduce, all_gather,
  their ``_coalesced``, ``_single``, ``_into_tensor`` and ``_base`` forms, barrier, the
  ``*_object`` ones, ...), replaced in the ``torch.distributed`` namespace by recording
  ones (:meth:`.recording_functions.CollectiveRecording.record_collectives`); a call on a
  subgroup this rank is not in, or one that raises, leaves no entry. Code calls them as
  ``dist.all_reduce(...)`` (torch's SyncBatchNorm, mmdet3d's NaiveSyncBatchNorm, mmdet's
  ``reduce_mean``, MMEngine's ``mmengine.dist``), and so is seen; a module that did
  ``from torch.distributed import all_reduce`` before the guard was built keeps the
  function it holds, and its calls are not recorded;
- DDP's gradient buckets, which its reducer all-reduces from C++, through the comm hook that
  the guard installs in modes ``'complete'`` and ``'strict'`` (:meth:`record_bucket`). In
  modes ``find_unused_parameters=True`` and ``static_graph`` there is no such hook, and the
  buckets are not in the record. With a user's comm hook, which then reduces the buckets,
  the record holds the counts' all-reduce on the last bucket and the hook's own
  ``torch.distributed`` calls (PowerSGD issues some from gloo's thread: a sequence of its
  own).

A recorded collective costs a tuple appended to a bounded deque and a walk up the issuing
Python stack that compares code objects with a set (the issuer, below): no clock, no I/O, no
collective. Inside a ``torch.compile`` trace nothing is recorded, so Dynamo sees the
functions it knows and compiles what it compiled without the guard.

The issuer of a collective is the innermost frame on the issuing stack whose ``self`` is a
submodule of the wrapped model, whatever its class (a codebase's own synchronised BN
included): ``refiner.1 (PluginSyncBN2d).forward, projects/.../norm.py:14``. A collective
issued outside the model (a hook, the loss parsing) is placed by the first frame outside
torch.
"""
import functools
import os
import sys
import threading
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

from .collective_functions import agreed_count, collective_functions

#: ``torch.distributed``'s collectives on this torch (:mod:`.collective_functions`).
COLLECTIVE_FUNCTIONS = collective_functions()
#: Entries of each group kept for the snapshot: enough to hold two iterations'
#: collectives of a detector with a SyncBN in every block (a ResNet-50's 53 BNs gather in
#: the forward and reduce in the backward), its loss reductions and DDP's buckets, so that
#: the first difference is still kept when a rank issued a whole iteration past it (NCCL).
#: An older difference still shows in the entries' digests.
KEPT_PER_GROUP = 256
#: Frames walked up from a collective to find its issuer.
_MAX_DEPTH = 64

# Not the caller's frames: torch's, and those of the decorator that marks deprecated ones.
_TORCH_DIRS = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, ) + tuple(
    os.path.abspath(module.__file__) for module in [sys.modules.get('typing_extensions')]
    if module is not None and getattr(module, '__file__', None))
WORLD = 'world'
#: Ends the group key of collectives issued by a Python thread other than the training
#: thread (a checkpoint written in the background): a sequence of their own.
OTHER_THREAD = ' from thread '
# A number per op, the same in every process (str hashes are salted per process), so that
# the ranks' digests compare.
_OP_CODES = {op: code for code, op in enumerate(sorted(set(COLLECTIVE_FUNCTIONS)
                                                         | {'all_reduce'}))}


class CollectiveLog:
    """This rank's collectives per process group, numbered from the start of the run.

    An entry is ``(index, op, numel, iteration, nth, issuer, digest)``: ``index`` counts
    the group's collectives from the first one recorded (the same on every rank while they
    pair), ``numel`` is None where ranks may legitimately differ, ``nth`` counts this
    iteration's collectives on every group from 1, ``issuer`` is ``('ddp', bucket)`` or
    ``(module, class, function, file, line)`` (module and class None outside the model), and
    ``digest`` hashes the ops and counts of the group's entries up to this one (equal on two
    ranks whose sequences agree so far, entries no longer kept included).

    The training thread's collectives (and those autograd runs for it on threads of its
    own) are one sequence per group; another Python thread's are a sequence of their own
    (``'world from thread saver'``), compared as such.

    Args:
        model (nn.Module): The wrapped model, whose submodules name the issuers.
    """

    def __init__(self, model: nn.Module):
        #: Collectives recorded on every group: progress, for the watchdog.
        self.total = 0
        self.iteration = -1
        self._nth = 0
        # key -> [count, deque of entries, digest, digest before the last entry]
        self._groups: Dict[str, List] = {}
        self._group_keys: Dict[int, Tuple[object, str]] = {}
        self._training_thread = threading.current_thread()
        self._module_names = {id(module): name or '<model>'
                              for name, module in model.named_modules()}
        self._method_codes = _method_codes(model)

    def start_iteration(self, iteration: int) -> None:
        self.iteration = iteration
        self._nth = 0

    def issued(self, group: str = WORLD) -> int:
        """How many collectives this rank issued on ``group`` since the run started."""
        return self._groups[group][0] if group in self._groups else 0

    def record_call(self, op: str, args: tuple, kwargs: dict) -> Optional[tuple]:
        """Records a call of ``op``; returns its entry, or None where this rank is not in
        the call's group (torch returns at once there: nothing is issued)."""
        group_position, counted = COLLECTIVE_FUNCTIONS[op]
        group = kwargs['group'] if 'group' in kwargs else (
            args[group_position] if len(args) > group_position else None)
        if group is not None and group is not dist.group.WORLD and dist.get_rank(group) < 0:
            return None
        numel = agreed_count(args[0] if args else kwargs.get(counted)) if counted else None
        key = self._key(group)
        thread = threading.current_thread()
        # A thread that Python did not start (autograd's, a C++ hook's) works for the
        # training thread; one that Python started is someone's own.
        if thread is not self._training_thread and \
                not isinstance(thread, threading._DummyThread):
            key += OTHER_THREAD + thread.name
        return self._append(key, op, numel, self._issuer())

    def take_back(self, entry: tuple) -> None:
        """Forgets ``entry``, the last recorded, whose call raised: nothing was issued."""
        for slot in self._groups.values():
            if slot[1] and slot[1][-1] is entry:
                slot[1].pop()
                slot[0] -= 1
                slot[2] = slot[3]  # the digest before it
                self.total -= 1
                self._nth -= 1
                return

    def record_bucket(self, group, bucket_index: int, numel: int) -> None:
        """From the guard's comm hook: DDP all-reduces gradient bucket ``bucket_index``."""
        self._append(self._key(group), 'all_reduce', numel, ('ddp', bucket_index))

    def snapshot(self) -> Dict[str, dict]:
        """Per group: ``issued`` and the last entries, JSON-ready."""
        while True:
            try:
                return {key: dict(issued=slot[0], entries=[_published(entry)
                                                           for entry in slot[1]])
                        for key, slot in list(self._groups.items())}
            except RuntimeError:  # the training thread appended meanwhile: read again
                continue

    def _append(self, key: str, op: str, numel: Optional[int], issuer: tuple) -> tuple:
        self._nth += 1
        self.total += 1
        slot = self._groups.get(key)
        if slot is None:
            slot = self._groups[key] = [0, deque(maxlen=KEPT_PER_GROUP), 0, 0]
        entries: Deque = slot[1]
        slot[3] = slot[2]
        slot[2] = hash((slot[2], _OP_CODES[op], numel))
        entry = (slot[0], op, numel, self.iteration, self._nth, issuer, slot[2])
        entries.append(entry)
        slot[0] += 1
        return entry

    def _key(self, group) -> str:
        if group is None or group is dist.group.WORLD:
            return WORLD
        known = self._group_keys.get(id(group))
        if known is None or known[0] is not group:
            ranks = global_ranks(group)
            known = self._group_keys[id(group)] = (group, 'ranks ' + ','.join(map(str, ranks)))
        return known[1]

    def _issuer(self) -> tuple:
        try:  # past _issuer, record_call, _recorded_call and the recording function
            frame = sys._getframe(4)
        except ValueError:  # a stack that shallow has no caller to name
            return (None, None, '?', 'torch', 0)
        call_site = None
        for _ in range(_MAX_DEPTH):
            if frame is None:
                break
            code = frame.f_code
            if code in self._method_codes:
                owner = frame.f_locals.get('self')
                name = self._module_names.get(id(owner))
                if name is not None:
                    return (name, type(owner).__name__, code.co_name, code.co_filename,
                            frame.f_lineno)
            if call_site is None and not code.co_filename.startswith(_TORCH_DIRS):
                call_site = (None, None, code.co_name, code.co_filename, frame.f_lineno)
            frame = frame.f_back
        return call_site or (None, None, '?', 'torch', 0)


def _published(entry: tuple) -> list:
    """An entry as the snapshot holds it: its issuer's path as the words print it (the
    same on every node, and short)."""
    issuer = entry[5]
    if issuer[0] != 'ddp':
        issuer = issuer[:3] + (short_path(issuer[3]), ) + issuer[4:]
    return list(entry[:5]) + [list(issuer), entry[6]]


@functools.lru_cache(maxsize=1024)
def short_path(path: str) -> str:
    """The same on every node: from the package folder on for installed code, else the
    path relative to the working directory (when a snapshot is taken, not per collective:
    ``os.path.relpath`` costs microseconds)."""
    marker = f'site-packages{os.sep}'
    if marker in path:
        return path.split(marker, 1)[1]
    relative = os.path.relpath(path)
    return path if relative.startswith('..') else relative


def _method_codes(model: nn.Module) -> frozenset:
    """The code objects of every function the classes of ``model``'s submodules define
    (nn.Module's own excluded), to recognise a submodule's frame without reading locals;
    through decorators too (mmcv's ``force_fp32``/``auto_fp16`` wrap many forwards of
    mmdet3d 0.x and the BEV codebases: the wrapper's frame has no ``self``, the function it
    wraps does)."""
    codes = set()
    for cls in {type(module) for module in model.modules()}:
        for klass in cls.__mro__:
            if klass in (nn.Module, object):
                continue
            for value in vars(klass).values():
                function = getattr(value, '__func__', value)
                while function is not None:
                    code = getattr(function, '__code__', None)
                    if code is not None:
                        codes.add(code)
                    function = getattr(function, '__wrapped__', None)
    return frozenset(codes)


def global_ranks(group) -> List[int]:
    """The ranks of ``group`` (None: the default group) in the default group."""
    if group is None or group is dist.group.WORLD:
        return list(range(dist.get_world_size()))
    get_ranks = getattr(dist, 'get_process_group_ranks', None)  # torch >= 2.0
    if get_ranks is not None:
        return list(get_ranks(group))
    to_global = dist.distributed_c10d._get_global_rank
    return [to_global(group, rank) for rank in range(dist.get_world_size(group))]
