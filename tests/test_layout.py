"""The package's architecture, read from its imports: one folder per concern, the
framework-free ones importing torch and each other only, one way (no circle between folders),
two adapters that each import one framework and never the other's (so that ``import
mmdet3d_ddp_guard`` works where only one is installed), a command line that reaches an
adapter only through the table of the frameworks, and no framework named outside the
adapters and that table. Every module opens with the concern it holds, in words of
its own."""
import ast
import importlib.util
import os
import os.path as osp
import re
import sys
import sysconfig
from typing import Dict, Iterator, List, Mapping, Optional, Set, Tuple

import pytest

import mmdet3d_ddp_guard
from mmdet3d_ddp_guard.environment import framework_table

PACKAGE = osp.dirname(mmdet3d_ddp_guard.__file__)
FRAMEWORKS = ('mmengine', 'mmcv', 'mmdet', 'mmdet3d', 'mmseg')
# The framework each adapter binds to; mmdet/mmdet3d are read lazily, where a config needs them.
ADAPTERS = {
    'openmmlab2': ('mmengine', 'mmcv', 'mmdet', 'mmdet3d'),
    'openmmlab1': ('mmcv', 'mmdet', 'mmdet3d'),
    # A plain PyTorch loop: torch alone.
    'pytorch': (),
    # PyTorch Lightning, either of its packages.
    'lightning': ('lightning', 'pytorch_lightning'),
}
MMCV1_ONLY = ('mmcv.parallel', 'mmcv.runner', 'mmcv.utils')
# What each framework-free folder may read of the package: the arrows run one way, from the
# product's use (reports, the rank simulation) down to the mechanism and the environment,
# whose words (the frameworks' names included) are the messages'.
READS = {
    'environment': ('environment', 'messages'),
    'messages': ('messages', ),
    'guard': ('environment', 'messages', 'guard', 'stall_guard'),
    'stall_guard': ('environment', 'messages', 'stall_guard'),
    'reporting': ('environment', 'messages', 'guard', 'reporting'),
    'rank_simulation': ('environment', 'messages', 'guard', 'reporting', 'rank_simulation'),
}
# The commands: at their modules' top the framework-free folders and Python's own library
# only; an adapter's module inside a function, where the config's framework is known, so
# that a command runs where only one framework is installed.
CLI = 'cli'
# Words that say nothing of a module's concern when its opening is its name and these.
FILLER = {'a', 'an', 'and', 'code', 'file', 'for', 'functions', 'helpers', 'in', 'is', 'it',
          'module', 'of', 'package', 'stuff', 'the', 'this', 'to', 'utilities', 'utils'}
PLACEHOLDERS = {'todo', 'fixme', 'xxx', 'tbd', 'wip'}
MIN_OPENING_WORDS = 6


def _file_imports(path: str) -> Iterator[Tuple[str, bool]]:
    """(absolute module name, inside a function) of every import in the file."""
    package = osp.relpath(osp.dirname(path), osp.dirname(PACKAGE)).split(os.sep)
    with open(path) as source:
        tree = ast.parse(source.read())

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, in_function
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - child.level + 1]
                    yield '.'.join(base + ([child.module] if child.module else [])), in_function
                else:
                    yield child.module, in_function
            yield from visit(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from visit(tree, False)


def _imports(folder: str) -> Iterator[Tuple[str, str, bool]]:
    """(file, absolute module name, inside a function) of every import in the folder, lazy
    ones included."""
    for root, _, files in os.walk(osp.join(PACKAGE, folder)):
        for name in sorted(files):
            if name.endswith('.py'):
                path = osp.join(root, name)
                for module, in_function in _file_imports(path):
                    yield path, module, in_function


def _folders() -> Set[str]:
    return {name for name in os.listdir(PACKAGE)
            if osp.isfile(osp.join(PACKAGE, name, '__init__.py'))}


def _standard_library(module: str) -> bool:
    """Whether ``module`` comes with Python: built in, frozen, or in its own library outside
    any site-packages."""
    top = module.split('.')[0]
    if top in sys.builtin_module_names:
        return True
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return False
    if spec.origin == 'frozen':
        return True
    origin = osp.abspath(spec.origin)
    return origin.startswith(osp.abspath(sysconfig.get_paths()['stdlib']) + os.sep) \
        and not any(part in origin.split(os.sep) for part in ('site-packages', 'dist-packages'))


def folder_graph() -> Dict[str, Set[str]]:
    """Each folder of the package -> the other folders its modules import, lazily or not."""
    graph = {folder: set() for folder in _folders()}
    for folder in graph:
        for _, module, _ in _imports(folder):
            parts = module.split('.')
            if parts[0] == 'mmdet3d_ddp_guard' and len(parts) > 1 and parts[1] in graph \
                    and parts[1] != folder:
                graph[folder].add(parts[1])
    return graph


def circle(graph: Mapping[str, Set[str]]) -> Optional[List[str]]:
    """One circle of ``graph`` (node -> the nodes it reaches), as its nodes in order with
    the first repeated at the end; None without any."""
    done: Set[str] = set()

    def search(node: str, path: List[str]) -> Optional[List[str]]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for target in sorted(graph.get(node, ())):
            found = search(target, path + [node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = search(start, [])
        if found:
            return found
    return None


def opening(docstring: str) -> str:
    """A docstring's first paragraph, on one line."""
    return ' '.join(docstring.strip().split('\n\n')[0].split())


def opening_problem(name: str, docstring: Optional[str]) -> Optional[str]:
    """What keeps the docstring of the module ``name`` (an ``__init__``'s: its folder's
    name) from saying what the module owns; None when nothing does.

    Its opening paragraph must be a sentence (it ends with a full stop or a question mark),
    of at least :data:`MIN_OPENING_WORDS` words, not a placeholder, and say more than the
    module's name: at least three words besides the name's and :data:`FILLER`.
    """
    if not docstring or not docstring.strip():
        return 'no docstring'
    text = opening(docstring)
    words = [word.strip('`*:;,.()[]{}\'"?!').lower() for word in text.split()]
    words = [word for word in words if word]
    if not words or words[0] in PLACEHOLDERS:
        return f'a placeholder, not a sentence: {text!r}'
    if not text.endswith(('.', '?')):
        return f'not a sentence (no full stop at the end of its first paragraph): {text!r}'
    if len(words) < MIN_OPENING_WORDS:
        return f'{len(words)} words; a sentence of at least {MIN_OPENING_WORDS} says what ' \
               f'the module owns: {text!r}'
    known = {name.lower()} | set(re.split(r'[_\W]+', name.lower())) | FILLER
    said = [word for word in words if not set(re.split(r'[_\W]+', word)) - {''} <= known]
    if len(said) < 3:
        return f'says little more than the name {name!r}: {text!r}'
    return None


def shared_first_lines(docstrings: Mapping[str, str]) -> Dict[str, List[str]]:
    """First lines that more than one module's docstring opens with -> those modules."""
    owners: Dict[str, List[str]] = {}
    for module, docstring in docstrings.items():
        owners.setdefault(docstring.strip().splitlines()[0].strip(), []).append(module)
    return {line: sorted(modules) for line, modules in owners.items() if len(modules) > 1}


def _docstrings() -> Dict[str, Optional[str]]:
    """Every module of the package (its path in it) -> its docstring."""
    found = {}
    for root, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith('.py'):
                path = osp.join(root, name)
                with open(path) as file:
                    found[osp.relpath(path, PACKAGE)] = ast.get_docstring(ast.parse(file.read()))
    return found


def _module_name(relpath: str) -> str:
    """The name a module's docstring must say more than: an ``__init__``'s is its folder's."""
    folder, file = osp.split(relpath)
    stem = file[:-len('.py')]
    if stem == '__init__':
        return osp.basename(folder) or 'mmdet3d_ddp_guard'
    return stem


def test_every_folder_of_the_package_is_a_concern_named_here():
    assert _folders() == set(READS) | set(ADAPTERS) | {CLI}


@pytest.mark.parametrize('folder', sorted(READS))
def test_framework_free_folders_import_torch_and_what_they_may_read(folder):
    for path, module, _ in _imports(folder):
        assert module.split('.')[0] not in FRAMEWORKS, (path, module)
        if module.startswith('mmdet3d_ddp_guard.'):
            assert module.split('.')[1] in READS[folder] + ('version', ), (path, module)


@pytest.mark.parametrize('adapter', sorted(ADAPTERS))
def test_an_adapter_imports_its_framework_and_not_the_other_adapters(adapter):
    others = [name for name in ADAPTERS if name != adapter]
    for path, module, _ in _imports(adapter):
        assert not module.startswith(tuple(f'mmdet3d_ddp_guard.{other}' for other in others)), \
            (path, module)
        if module.split('.')[0] in FRAMEWORKS:
            assert module.split('.')[0] in ADAPTERS[adapter], (path, module)
        if adapter == 'openmmlab2':
            assert not module.startswith(MMCV1_ONLY), (path, module)


def test_the_commands_import_no_framework_and_no_adapter_by_name():
    """A command reaches the adapter of a config's framework through the framework table's
    row (``importlib``, while it runs), never by an import that names the adapter."""
    for path, module, in_function in _imports(CLI):
        assert module.split('.')[0] not in FRAMEWORKS, (path, module)
        parts = module.split('.')
        if parts[0] == 'mmdet3d_ddp_guard' and len(parts) > 1:
            assert parts[1] in set(READS) | {CLI, 'version'}, (path, module)
        elif not in_function:
            assert _standard_library(module), (path, module)


@pytest.mark.parametrize('module, standard', [('os', True), ('ast', True), ('typing', True),
                                              ('sys', True), ('torch', False),
                                              ('mmdet3d_ddp_guard', False),
                                              ('no_such_module_here', False)])
def test_the_standard_library_is_told_from_installed_packages(module, standard):
    assert _standard_library(module) is standard


def module_graph() -> Dict[str, Set[str]]:
    """Each module of the package -> the package's modules it imports, lazily or not (a
    package stands for its ``__init__``)."""
    root = osp.dirname(PACKAGE)
    paths = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith('.py'):
                path = osp.join(folder, name)
                dotted = osp.relpath(path, root)[:-len('.py')].replace(os.sep, '.')
                paths[dotted[:-len('.__init__')] if dotted.endswith('.__init__') else dotted] \
                    = path
    return {module: {imported for imported, _ in _file_imports(path)
                     if imported in paths and imported != module}
            for module, path in paths.items()}


def test_the_modules_import_each_other_without_a_circle():
    """Between files too, lazy imports included: a module that must import its importer
    inside a function is a sign that a piece of one belongs elsewhere."""
    graph = module_graph()
    assert 'mmdet3d_ddp_guard.environment.version_numbers' in graph[
        'mmdet3d_ddp_guard.environment.frameworks']
    assert circle(graph) is None, circle(graph)


def test_the_folders_import_each_other_without_a_circle():
    graph = folder_graph()
    # The graph is read from the imports: the folders' known arrows are in it.
    assert 'messages' in graph['environment'] and 'guard' in graph['rank_simulation']
    assert circle(graph) is None, circle(graph)


@pytest.mark.parametrize('graph, found', [
    ({'environment': {'messages'}, 'messages': {'environment'}},
     ['environment', 'messages', 'environment']),
    ({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}, ['a', 'b', 'c', 'a']),
    ({'a': {'a'}}, ['a', 'a']),
    ({'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}, None),
    ({'a': {'b'}, 'b': {'outside'}}, None),
])
def test_a_circle_is_found_where_there_is_one(graph, found):
    assert circle(graph) == found


def rebound_globals(source: str) -> List[str]:
    """The module globals that ``global`` statements in ``source`` rebind."""
    return sorted({name for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Global) for name in node.names})


def test_no_module_global_is_rebound_after_import():
    """State lives in objects: a module's globals are bound once, at import, so that what a
    wrapper, the stall guard or a record holds is found on an object, not in a name that
    changes under its readers."""
    found = {}
    for root, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith('.py'):
                with open(osp.join(root, name)) as source:
                    names = rebound_globals(source.read())
                if names:
                    found[osp.relpath(osp.join(root, name), PACKAGE)] = names
    assert found == {}, found


def test_a_rebound_global_is_found():
    assert rebound_globals('x = 1\ndef f():\n    global x\n    x = 2\n') == ['x']
    assert rebound_globals('x = []\ndef f():\n    x.append(2)\n') == []


#: The folders of mechanism: their messages are built by messages/ from the data they pass.
MECHANISM = ('guard', 'stall_guard')
#: A string of this many words or more, outside a docstring, is text for a user.
MESSAGE_WORDS = 3


def message_texts(source: str) -> List[Tuple[int, str]]:
    """(line, text) of the string constants in ``source`` (f-strings' literal parts
    included) of :data:`MESSAGE_WORDS` words or more that are not docstrings."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            docstrings.add(id(node.body[0].value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and len(node.value.split()) >= MESSAGE_WORDS]


def test_the_mechanism_builds_no_message():
    """guard/ and stall_guard/ hold no text for a user: they decide, and hand the data to a
    function of messages/ for the words (one place to read and change every message)."""
    found = {}
    for folder in MECHANISM:
        for name in sorted(os.listdir(osp.join(PACKAGE, folder))):
            if name.endswith('.py'):
                with open(osp.join(PACKAGE, folder, name)) as source:
                    texts = message_texts(source.read())
                if texts:
                    found[f'{folder}/{name}'] = texts
    assert found == {}, found


def test_a_message_in_the_mechanism_is_found():
    source = ('"""Doc of the module."""\ndef f(x):\n    """Doc of f, many words."""\n'
              "    raise ValueError(f'{x}: cannot be used here')\n"
              "LABEL = 'two words'\n")
    assert message_texts(source) == [(4, ': cannot be used here')]


#: The one table of the frameworks; with the adapters, the only modules that name one.
FRAMEWORK_TABLE = 'environment/framework_table.py'


def framework_identities() -> Set[str]:
    """What names a framework: the table's own names for one (its constants and lines), and
    each row's name, adapter package and modules."""
    found = {name for name in vars(framework_table)
             if name.startswith(('MMENGINE', 'MMCV1', 'PYTORCH', 'LIGHTNING'))}
    for row in framework_table.FRAMEWORKS:
        found.update([row.name, row.adapter], (name for name, _ in row.modules))
    # torch is what every module is written on, not a framework's mark: the plain row's
    # distribution (and name) is named by every `import torch`.
    return found - {'torch'}


def framework_references(source: str, identities: Set[str]) -> List[str]:
    """Where ``source`` names a framework: a name or attribute that is one of
    ``identities``, a string constant equal to one, an import from an adapter package.
    Prose (docstrings, and messages that mention a framework) dispatches nothing and is not
    counted."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in identities \
                or isinstance(node, ast.Attribute) and node.attr in identities \
                or isinstance(node, ast.alias) and node.name in identities:
            found.append(getattr(node, 'id', None) or getattr(node, 'attr', None) or node.name)
        elif isinstance(node, ast.Constant) and node.value in identities:
            found.append(repr(node.value))
        elif isinstance(node, ast.ImportFrom) and node.module and \
                identities & set(node.module.split('.')):
            found.append(f'from {node.module}')
    return found


def modules_outside_the_adapters_and_the_table() -> Iterator[Tuple[str, str]]:
    """(path in the package, source) of every module but the adapters' and the table's."""
    for root, _, files in os.walk(PACKAGE):
        relative = osp.relpath(root, PACKAGE)
        if relative.split(os.sep)[0] in ADAPTERS:
            continue
        for name in sorted(files):
            path = osp.normpath(osp.join(relative, name))
            if name.endswith('.py') and path != osp.normpath(FRAMEWORK_TABLE):
                with open(osp.join(root, name)) as source:
                    yield path, source.read()


def test_only_the_adapters_and_the_table_name_a_framework():
    """Adding a framework means one adapter folder and one row of the table: everything else
    (``check``, ``summarize``, the reports, the messages, the guard, the package's import)
    dispatches through the table's rows."""
    identities = framework_identities()
    found = {path: framework_references(source, identities)
             for path, source in modules_outside_the_adapters_and_the_table()}
    assert {path: found for path, found in found.items() if found} == {}


#: What names a framework in a string: a dotted path into one of its packages
#: (``'mmcv.ops.sync_bn'``), or a class or config key that one of them defines, as the table's
#: rows list them (``words``; the guard's own names, GuardedDDP and UnusedParamsHook, are the
#: package's, shared by its adapters).
FRAMEWORK_PATH = re.compile(r'\b(?:' + '|'.join(FRAMEWORKS) + r')\.[A-Za-z_]')
FRAMEWORK_WORDS = re.compile(r'\b(?:' + '|'.join(sorted({
    word for row in framework_table.FRAMEWORKS
    for word in row.words})) + r')\b')


def framework_strings(source: str) -> List[str]:
    """The string constants of ``source`` outside docstrings (f-strings' literal parts
    included) that name a framework's module path, class or config key."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and ast.get_docstring(node, clean=False) is not None}
    return [found for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            for found in FRAMEWORK_PATH.findall(node.value) + FRAMEWORK_WORDS.findall(node.value)]


def test_only_the_adapters_and_the_table_hold_a_framework_s_words():
    """Every difference between the frameworks is a field of the table's row: no module
    outside the adapters and the table holds a framework's module path, class name or
    config key in its code (a message included; docstrings and comments are prose)."""
    found = {path: framework_strings(source)
             for path, source in modules_outside_the_adapters_and_the_table()}
    assert {path: found for path, found in found.items() if found} == {}


def test_a_framework_s_words_in_a_string_are_found():
    assert sorted(framework_strings(
        '"""Docstrings are prose: mmcv.ops and model_wrapper_cfg."""\n'
        "KNOWN = {('mmcv.ops.sync_bn', 'SyncBatchNorm')}\n"
        "message = f'write {x} in model_wrapper_cfg or norm_cfg'\n"
        "plain = 'torch.nn.SyncBatchNorm and GuardedDDP'\n")) == \
        ['mmcv.o', 'model_wrapper_cfg', 'norm_cfg']


def test_a_framework_named_outside_the_table_is_found():
    identities = framework_identities()
    assert sorted(framework_references(
        'from ..environment.framework_table import MMCV1\n'
        "if framework == MMCV1 or name == 'mmengine':\n"
        '    from ..openmmlab1 import config_reading\n'
        '"""MMEngine and mmcv in prose."""\n', identities)) == \
        ["'mmengine'", 'MMCV1', 'MMCV1', 'from openmmlab1']


def test_each_stall_guard_module_is_short():
    """The stall guard's modules (the thread, the store protocol, the record, the
    judgement, the exit) each stay under 300 lines."""
    folder = osp.join(PACKAGE, 'stall_guard')
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.py'):
            continue
        with open(osp.join(folder, name)) as file:
            assert file.read().count('\n') < 300, name


def test_every_module_opens_with_what_it_owns():
    """Each module holds one concern and its docstring names it, so a reader finds where a
    thing lives from the first lines of each file, ``__init__`` and ``version`` included: an
    opening sentence that says more than the module's name, and a first line that no other
    module opens with (two modules that claim one concern)."""
    docstrings = _docstrings()
    problems = {path: opening_problem(_module_name(path), docstring)
                for path, docstring in docstrings.items()}
    assert {path: problem for path, problem in problems.items() if problem} == {}
    assert shared_first_lines(docstrings) == {}


@pytest.mark.parametrize('name, docstring', [
    ('run_end', None),
    ('run_end', '   '),
    ('run_end', 'run_end.'),
    ('run_end', 'The run_end module.'),
    ('run_end', 'Run end: the code of the run end module, for the package.'),
    ('stall_watchdog', 'Stall watchdog utilities and helpers for this package.'),
    ('stall_watchdog', 'TODO: say what the thread does when a rank stops moving.'),
    ('stall_watchdog', 'The thread that turns a hang into a named error on every rank\n\n'
                       'It wakes every tick.'),
    ('summary', 'Writes the summary files.'),
])
def test_an_opening_that_does_not_say_what_the_module_owns_is_refused(name, docstring):
    assert opening_problem(name, docstring) is not None


@pytest.mark.parametrize('name, docstring', [
    ('run_end', 'How a stop verdict ends this rank: it waits while any rank writes a\n'
                'checkpoint, then exits.\n\nMore.'),
    ('cli', 'Command-line tools: ``python -m mmdet3d_ddp_guard {check,summarize}``.'),
    ('stall_watchdog', 'Would the stall watchdog name the hang on every rank, in time?'),
])
def test_an_opening_sentence_of_its_own_is_accepted(name, docstring):
    assert opening_problem(name, docstring) is None


def test_two_modules_opening_with_one_first_line_are_found():
    docstrings = {'guard/completion.py': 'The guard itself, for any DDP.\n\nMore.',
                  'guard/__init__.py': 'The guard itself, for any DDP.',
                  'guard/errors.py': 'The errors the guarded wrappers raise.'}
    assert shared_first_lines(docstrings) == {
        'The guard itself, for any DDP.': ['guard/__init__.py', 'guard/completion.py']}
    assert shared_first_lines({'guard/errors.py': 'The errors the guarded wrappers raise.'}) \
        == {}
