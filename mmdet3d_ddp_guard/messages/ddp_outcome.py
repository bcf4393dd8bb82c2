"""What plain DDP does with an iteration: ``ok``, ``fails`` or ``hangs``, in one set of words.

``check --world-size N`` predicts these outcomes, :class:`UnusedParamsHook`'s summary and
GuardedDDP's decision report them from a live run; all three import the names and the
sentences from here, so a user reads the same words for the same thing everywhere.
"""
from typing import Optional, Sequence

#: Every rank used every parameter and ran the same forward collectives.
OK = 'ok'
#: Some rank left parameters unused: DDP's "Expected to have finished reduction" error.
FAILS = 'fails'
#: A forward collective (SyncBatchNorm-type layer) ran on some ranks and not on others.
HANGS = 'hangs'

OUTCOMES = (OK, FAILS, HANGS)

PLAIN_DDP = 'plain DDP (find_unused_parameters=False)'

#: Why, in a sentence or three; completed by :func:`outcome_line`.
OUTCOME_EXPLANATIONS = {
    OK: 'every rank used every parameter and ran the same forward collectives.',
    FAILS: 'a rank that left parameters unused raises "Expected to have finished reduction in '
           'the prior iteration" at its next forward, and the ranks that used them wait in '
           'the gradient all-reduce until torchrun kills them (or, without torchrun, until '
           "the collective timeout). The guard (mmdet3d_ddp_guard, its default mode) trains it.",
    HANGS: 'a layer that runs a collective in its forward (SyncBatchNorm and the like) ran on '
           'some ranks and not on others, so the ranks that ran it wait, before any backward, '
           'in a collective the others never join (or meet another collective there: '
           'undefined results), until the collective timeout. No DDP option helps, '
           'the guard included. (Where the skipped branch also holds parameters, the '
           'skipping rank of plain DDP may raise "Expected to have finished reduction" '
           'first, and torchrun then ends the job with that error.) Fix: use BN or GN in '
           'that branch, or run the branch on every rank.',
}


#: Said instead of an outcome line when parameters went unused but autograd reached them all.
UNDEFINED_GRADIENTS_ONLY = (
    f'{PLAIN_DDP} would not fail on these: autograd reached them all, but their gradients '
    'stayed undefined (a custom autograd Function returned None); plain DDP reduces such '
    'gradients as zeros, so momentum and weight decay still move those weights, where '
    'the guard and find_unused_parameters=True leave .grad None when no rank defined it.')


def outcome_line(outcome: str, iteration: Optional[int] = None,
                 ranks: Sequence[int] = ()) -> str:
    """``'plain DDP (find_unused_parameters=False) fails at iteration 0 on rank 0: a rank
    that ...'``."""
    where = '' if iteration is None else f' at iteration {iteration}'
    if ranks:
        where += f' on rank{"s" if len(ranks) > 1 else ""} {", ".join(map(str, ranks))}'
    verb = 'is ok' if outcome == OK else outcome
    return f'{PLAIN_DDP} {verb}{where}: {OUTCOME_EXPLANATIONS[outcome]}'
