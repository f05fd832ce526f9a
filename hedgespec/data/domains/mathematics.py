"""math: question/answer pairs from DeepMind's mathematics_dataset generator.

The generator's training modules give the corpus and its held-out ("interpolate") modules the
prompts; the package keeps the two apart by construction. Version 1.0.1 predates NumPy 2 and
current sympy, so an unpacked copy is patched (exact textual replacements, checked) before use.
"""
import hashlib
import importlib
import random
import shutil
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from ..sources import SourceError, Sources
from ..templates import Ask

SOURCES = ("mathematics-dataset",)

TRAIN_PROBLEMS = 20_000
SEED = 1

PATCHES = (
    # base_solution_linear moved into sympy.solvers.diophantine.diophantine (sympy >= 1.6).
    ("mathematics_dataset/sample/polynomials.py",
     "from sympy.solvers.diophantine import base_solution_linear",
     "from sympy.solvers.diophantine.diophantine import base_solution_linear"),
    # NumPy 2 removed the np.object alias and ndarray.itemset; plain indexing is equivalent here
    # (the indices are full tuples, so an object array stores the list as one element).
    ("mathematics_dataset/sample/polynomials.py", "np.object", "object"),
    ("mathematics_dataset/sample/polynomials.py", "coeffs.itemset(index, value)", "coeffs[index] = value"),
    ("mathematics_dataset/sample/polynomials.py", "expanded_coefficients.itemset(power, coeffs)",
     "expanded_coefficients[power] = coeffs"),
    # absl is only used for one log line; the standard logging module has the same call.
    ("mathematics_dataset/sample/ops.py", "from absl import logging", "import logging"),
    # Determinism: these draw from sets, whose order depends on the process (string hashing,
    # object addresses); a sorted list and an insertion-ordered dict make a seed reproduce.
    ("mathematics_dataset/util/composition.py", "random.choice(list(allowed))", "random.choice(sorted(allowed))"),
    ("mathematics_dataset/util/composition.py", "entities = set(context.child_entities)",
     "entities = dict.fromkeys(context.child_entities)"),
    ("mathematics_dataset/util/composition.py", "entities.add(maybe_entity)", "entities[maybe_entity] = None"),
)


def _patched(src: Sources) -> Path:
    dest = src.downloads / "patched" / "mathematics-dataset"
    stamp = hashlib.sha256(repr(PATCHES).encode()).hexdigest()  # new patches re-patch old copies
    if (dest / ".complete").exists() and (dest / ".complete").read_text() == stamp:
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src.file("mathematics-dataset", "mathematics_dataset"), dest / "mathematics_dataset")
    for rel, old, new in PATCHES:
        path = dest / rel
        text = path.read_text(encoding="utf-8")
        if old not in text:
            raise SourceError(f"cannot patch {rel} of mathematics-dataset: {old!r} not found")
        path.write_text(text.replace(old, new), encoding="utf-8")
    (dest / ".complete").write_text(stamp)
    return dest


@contextmanager
def _generator(src: Sources, seed: int):
    """The package's modules, with the global random states it draws from seeded for the duration
    (and restored afterwards, so the build leaves no trace on other users of them)."""
    root = str(_patched(src))
    if root not in sys.path:
        sys.path.insert(0, root)
    # sympy's randprime has a generator of its own (imported here: sympy is slow to import).
    sympy_random = importlib.import_module("sympy.core.random")
    saved = random.getstate(), np.random.get_state(), sympy_random.rng.getstate()
    random.seed(seed)
    np.random.seed(seed)
    sympy_random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield (importlib.import_module("mathematics_dataset.modules.modules"),
                   importlib.import_module("mathematics_dataset.generate_settings"))
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        sympy_random.rng.setstate(saved[2])


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        flat.update(_flatten(value, name + "/") if isinstance(value, dict) else {name: value})
    return dict(sorted(flat.items()))


def _sample(module, settings) -> tuple[str, str]:
    """One problem within the package's length limits (its own generate.py drops the rest too)."""
    while True:
        problem = module()
        question, answer = str(problem.question), str(problem.answer)
        if len(question) <= settings.MAX_QUESTION_LENGTH and len(answer) <= settings.MAX_ANSWER_LENGTH:
            return question, answer


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    with _generator(src, SEED) as (modules, settings):
        train = _flatten(modules.train(lambda entropy: entropy))
        names = list(train)
        for i in range(TRAIN_PROBLEMS):
            question, answer = _sample(train[names[i % len(names)]], settings)
            yield "mathematics-dataset", f"Question: {question}\nAnswer: {answer}"


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    with _generator(src, rng.randrange(2**31)) as (modules, settings):
        test = _flatten(modules.test())
        picked = [_sample(test[name], settings) for name in rng.sample(list(test), 40)]
    out = [Ask("question", "solve_math", {"question": q}, a) for q, a in picked[:26]]
    out += [Ask("copy", "check_math", {"question": q, "answer": a}, a) for q, a in picked[26:]]
    return out
