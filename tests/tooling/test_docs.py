"""The documentation builds without a warning, and names only what exists.

Sphinx itself checks the links between pages and their anchors. What it cannot see is a path
written as code (`mmdet3d_ddp_guard/openmmlab2/cpu_launch.py`, `configs/...`, a pytest node id): the
checker below reads README.md and docs/**/*.md and requires every such path to exist, so the
docs cannot drift from the code. It checks the Markdown links too, so that README.md, which
GitHub shows first, is held without a Sphinx build.
"""
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Optional, Set, Tuple

from tests.timeouts import scaled

ROOT = Path(__file__).resolve().parents[2]
# Top-level folders that hold no documented code: local state, built or generated.
NOT_DOCUMENTED = {'.git', '.venv', 'build', 'data', 'work_dirs', '.pytest_cache'}
# Paths the docs name in other projects (mmdet3d's training scripts), not in this one.
NOT_OURS = {'tools/train.py', 'tools/dist_train.sh'}
# Written by the zoo run (benchmarks/zoo.py), which names mmdet3d's own config paths.
GENERATED_DOCS = ('docs/zoo/', )

_FENCE = re.compile(r'^\s*(```|~~~)')
_INLINE_CODE = re.compile(r'`([^`]+)`')
_LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
_HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
_NODE = re.compile(r'^(?P<path>[^:]*)(::(?P<name>\w+))?')


def doc_files(root: Path) -> List[Path]:
    files = [root / 'README.md'] + sorted((root / 'docs').glob('**/*.md'))
    return [f for f in files if f.is_file() and not any(
        f.relative_to(root).as_posix().startswith(prefix) for prefix in GENERATED_DOCS)]


def slug(heading: str) -> str:
    """The anchor MyST (myst_heading_anchors) and GitHub give a heading."""
    text = re.sub(r'[`*]|\[([^\]]*)\]\([^)]*\)', r'\1', heading).strip().lower()
    return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def anchors(path: Path) -> Set[str]:
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _HEADING.match(line):
            found.add(slug(_HEADING.match(line).group(2)))
    return found


def _lines(path: Path) -> Iterator[Tuple[int, str, bool]]:
    """(line number, text, inside a code block)."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        yield number, line, fenced


def _path_problem(token: str, root: Path, top: Set[str],
                  last_file: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(what is wrong with ``token`` or None, the file it names for a later ``::name``)."""
    token = token.strip('\'"(),;[]{}$')
    if token.startswith('::') and last_file:
        token = last_file + token
    match = _NODE.match(token)
    path, name = match.group('path'), match.group('name')
    if '/' not in path or '://' in token or path.split('/')[0] not in top:
        return None, last_file
    if path in NOT_OURS:
        return None, last_file
    path = path.rstrip('.').rstrip('/') if path.endswith('...') else path
    if not glob.glob(str(root / path)):
        return f'`{path}` does not exist', last_file
    if name and not re.search(rf'^\s*(def|class) {name}\b', (root / path).read_text(), re.M):
        return f'`{path}` has no test `{name}`', path
    return None, path if path.endswith('.py') else last_file


def check_docs(root: Path = ROOT) -> List[str]:
    """Every problem in README.md and docs/**/*.md under ``root``, as 'file:line: what'."""
    top = {p.name for p in root.iterdir()} - NOT_DOCUMENTED
    problems = []
    for doc in doc_files(root):
        where = doc.relative_to(root).as_posix()
        for number, line, fenced in _lines(doc):
            spans = line.split() if fenced else [
                token for span in _INLINE_CODE.findall(line) for token in span.split()]
            last_file = None
            for token in spans:
                problem, last_file = _path_problem(token, root, top, last_file)
                if problem:
                    problems.append(f'{where}:{number}: {problem}')
            if fenced:
                continue
            for target in _LINK.findall(_INLINE_CODE.sub('', line)):
                if re.match(r'^[a-z]+:', target):
                    continue
                file_part, _, anchor = target.partition('#')
                linked = (doc.parent / file_part).resolve() if file_part else doc
                if not linked.exists():
                    problems.append(f'{where}:{number}: link to {target}: no such file')
                elif anchor and linked.suffix == '.md' and anchor not in anchors(linked):
                    problems.append(f'{where}:{number}: link to {target}: no such heading')
    return problems


def test_docs_name_only_paths_and_anchors_that_exist():
    problems = check_docs()
    assert not problems, 'The docs name what does not exist:\n' + '\n'.join(problems)


#: The README is read before the first line of config: five minutes, at most this long.
README_WORDS, README_LINES = 1200, 150


def test_the_readme_reads_in_five_minutes():
    text = (ROOT / 'README.md').read_text()
    words, lines = len(text.split()), text.count('\n')
    assert words <= README_WORDS and lines <= README_LINES, (
        f'README.md has {words} words and {lines} lines, over {README_WORDS} and '
        f'{README_LINES}: move what a new user does not need in the first five minutes '
        'to docs/')


def test_the_checker_finds_each_kind_of_mistake(tmp_path):
    (tmp_path / 'pkg').mkdir()
    (tmp_path / 'pkg' / 'real.py').write_text('def test_there():\n    pass\n')
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'page.md').write_text('# Page\n\n## A section\n')
    (tmp_path / 'README.md').write_text('\n'.join([
        '# Readme',
        'Good: `pkg/real.py::test_there`, [a section](docs/page.md#a-section), `tools/train.py`',
        'Bad path: `pkg/gone.py`',
        'Bad test: `pkg/real.py::test_there`, `::test_missing`',
        'Bad link: [page](docs/nope.md), bad anchor: [section](docs/page.md#no-section)',
        '```bash',
        'python pkg/missing_script.py --flag',
        '```',
    ]))
    problems = check_docs(tmp_path)
    assert problems == [
        'README.md:3: `pkg/gone.py` does not exist',
        'README.md:4: `pkg/real.py` has no test `test_missing`',
        'README.md:5: link to docs/nope.md: no such file',
        'README.md:5: link to docs/page.md#no-section: no such heading',
        'README.md:7: `pkg/missing_script.py` does not exist',
    ]


def test_zoo_documents_are_rendered_from_zoo_json():
    """docs/zoo/README.md and the zoo section of docs/compatibility.md say what
    docs/zoo/zoo.json says: rerun
    ``benchmarks/zoo.py --render`` after changing the rows or benchmarks/zoo_render.py."""
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    import zoo_render
    rows = json.loads((ROOT / 'docs' / 'zoo' / 'zoo.json').read_text())
    assert (ROOT / 'docs' / 'zoo' / 'README.md').read_text() == zoo_render.render(rows)
    assert zoo_render.readme_section(rows) in (ROOT / zoo_render.SECTION_PAGE).read_text()


def test_zoo_section_names_configs_that_leave_parameters_unused_without_the_flag():
    """The zoo's rows of mmdet3d 1.4.0 have no such config, so the section shows "none"; a
    row that has one (here the SMOKE row with the flag taken away) is listed with how many
    of them plain DDP would fail on."""
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    import zoo_render

    def unset_item(rows):
        section = zoo_render.readme_section(rows)
        return ' '.join(
            section.split('without setting it**')[1].split('- **Would hang')[0].split())

    rows = json.loads((ROOT / 'docs' / 'zoo' / 'zoo.json').read_text())
    assert unset_item(rows) == '(they can crash on some batch): - none'
    smoke = next(r for r in rows if r['config'].startswith('smoke/'))
    section = unset_item([dict(r, sets_find_unused=False) if r is smoke else r for r in rows])
    assert 'plain DDP would fail on 8 GPUs with 1 of these 1' in section, section
    assert smoke['config'].split('/')[1] in section and 'none' not in section, section


def test_zoo_table_says_what_is_still_to_run_only_while_something_is():
    """The finished rows render no "Not yet checked" line; a run stopped with a row pending
    says so, and its empty lists say "so far"."""
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    import zoo_render
    rows = json.loads((ROOT / 'docs' / 'zoo' / 'zoo.json').read_text())
    assert 'Not yet checked' not in zoo_render.render(rows)
    first_ok = next(r for r in rows if r['status'] == 'ok')
    stopped = zoo_render.render([dict(r, status='pending') if r is first_ok else r
                                 for r in rows])
    assert 'Not yet checked: 1 configs' in stopped
    assert '- none among the configs checked so far' in stopped


def test_sphinx_builds_the_docs_without_a_warning(tmp_path):
    """What ``make docs`` runs, into a temporary folder; autodoc imports the package. Most of
    the time is torch's import: minutes on a 2-core machine that other jobs keep busy, hence
    a timeout just under pytest.ini's."""
    command = [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
               '-c', 'docs', '.', str(tmp_path / 'html')]
    try:
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                timeout=scaled(840), env=dict(os.environ, PYTHONWARNINGS='ignore'))
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f'sphinx-build ran past {error.timeout} s') from None
    assert result.returncode == 0, (
        'make docs fails (sphinx and myst-parser are pinned in requirements/stack.txt):\n'
        + result.stdout[-4000:] + result.stderr[-8000:])
    assert (tmp_path / 'html' / 'docs' / 'reference' / 'guarded_ddp.html').is_file()
