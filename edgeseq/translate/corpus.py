"""English -> French sentence pairs, read at run time from an installed package (nothing copied in).

Default corpus `jupyterlab-fr`: the JupyterLab French language pack
(`jupyterlab-language-pack-fr-fr`, BSD-3-Clause), whose `locale/fr_FR/LC_MESSAGES/*.json`
files map English UI strings to their French translations, written by people. All of the
pack's files are read, not only `jupyterlab.json`: the extensions' catalogs (git, LSP,
notebook, ...) add about 1,100 pairs to jupyterlab.json's 2,100, in the same domain.

Cleaning: a message context (`settings\\x04...`) is dropped, plural entries take the singular
form, whitespace is collapsed, pairs with an empty side or over `MAX_WORDS` words are left
out, and each English string is kept once (first file, in name order).

Split: by a hash of the English string, 80 / 10 / 10 train / dev / test. It does not depend
on file order or on which other pairs exist, so adding pairs never moves old ones.

Users bring their own corpus as a TSV file: one pair per line, `source<TAB>target`, UTF-8,
optionally a third column `train`, `dev` or `test`.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from edgeseq.errors import DataError

DEFAULT = "jupyterlab-fr"
PACKAGE = "jupyterlab_language_pack_fr_FR"
MAX_WORDS = 32
MAX_BYTES = 256 << 20          # a TSV corpus larger than this is refused (the default one is 0.3 MB)
SPLITS = ("train", "dev", "test")


@dataclass
class Corpus:
    name: str
    train: list          # [(source, target), ...]
    dev: list
    test: list
    source_lang: str = "en"
    target_lang: str = "fr"

    def split(self, name: str) -> list:
        if name not in SPLITS:
            raise DataError(f"unknown split '{name}'; use train, dev or test")
        return getattr(self, name)


def clean(text: str) -> str:
    return " ".join(text.split())


def split_of(source: str) -> str:
    h = int(hashlib.sha1(source.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if h < 80 else "dev" if h < 90 else "test"


def _package_dir() -> Path:
    import importlib.util
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the default corpus comes from the package jupyterlab-language-pack-fr-fr, which is not "
                        "installed; pip install '.[translate]' in edgeseq's clone (or give a TSV corpus with --corpus)")
    return Path(list(spec.submodule_search_locations)[0])


def jupyterlab_pairs() -> list:
    root = _package_dir() / "locale" / "fr_FR" / "LC_MESSAGES"
    files = sorted(glob.glob(str(root / "*.json")))
    if not files:
        raise DataError(f"no message catalogs under {root}; reinstall jupyterlab-language-pack-fr-fr")
    pairs, seen = [], set()
    for f in files:
        with open(f, encoding="utf-8") as fh:
            catalog = json.load(fh)
        for key, value in catalog.items():
            if not key or not isinstance(value, list) or not value or not isinstance(value[0], str):
                continue                                  # the header entry has an empty key
            src, tgt = clean(key.split("\x04")[-1]), clean(value[0])
            if src and tgt and src not in seen:
                seen.add(src)
                pairs.append((src, tgt))
    return pairs


def _tsv_pairs(path: Path) -> list:
    rows = []
    with open(path, "rb") as f:                   # also a pipe, e.g. --corpus <(zcat pairs.tsv.gz)
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise DataError(f"'{path}' is larger than {MAX_BYTES >> 20} MiB; give a smaller corpus")
    try:
        lines = raw.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise DataError(f"'{path}' is not UTF-8 text; save the corpus as UTF-8") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) not in (2, 3):
            raise DataError(f"'{path}' line {i}: expected source<TAB>target[<TAB>split], got {len(cols)} columns")
        if len(cols) == 3 and cols[2].strip() not in SPLITS:
            raise DataError(f"'{path}' line {i}: split must be train, dev or test, got '{cols[2].strip()}'")
        src, tgt = clean(cols[0]), clean(cols[1])
        if src and tgt:
            rows.append((src, tgt, cols[2].strip() if len(cols) == 3 else None))
    if not rows:
        raise DataError(f"'{path}' holds no sentence pairs; give one source<TAB>target pair per line")
    return rows


def load_corpus(spec: str = DEFAULT, max_words: int = MAX_WORDS) -> Corpus:
    """The default package corpus, or a TSV file of pairs."""
    if spec == DEFAULT:
        rows = [(s, t, None) for s, t in jupyterlab_pairs()]
        name = f"{DEFAULT} ({PACKAGE})"
    else:
        path = Path(os.path.expanduser(spec))
        if path.is_dir():
            raise DataError(f"corpus '{spec}' is a directory; give a TSV file of source<TAB>target lines")
        if not path.exists():
            raise DataError(f"corpus '{spec}' not found; use '{DEFAULT}' or a TSV file of source<TAB>target lines")
        rows = _tsv_pairs(path)
        name = path.name
    out = {s: [] for s in SPLITS}
    for src, tgt, split in rows:
        if len(src.split()) > max_words or len(tgt.split()) > max_words:
            continue
        out[split or split_of(src)].append((src, tgt))
    if not out["train"] or not out["test"]:
        raise DataError(f"corpus '{spec}' has {len(out['train'])} training and {len(out['test'])} test pairs; "
                        "it needs both")
    return Corpus(name=name, **out)
