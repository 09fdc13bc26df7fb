"""The payload cache of :class:`~ragspine.retrieval.lexical.LexicalIndex` (:class:`PayloadCache`):
whole payloads of indexed points, LRU, each kept with the manifest signature of its document it
was read under and used only while that signature is current."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ragspine.policy import point_restricted
from ragspine.retrieval.lexical.postings import DocSig, LibView
from ragspine.store.base import Record, Store


class PayloadCache:
    """Up to ``capacity`` whole payloads, keyed by (library, point id)."""

    def __init__(self, store: Store, capacity: int) -> None:
        self.store = store
        self.capacity = capacity
        self._payloads: OrderedDict[tuple[str, str], tuple[DocSig | None, dict[str, Any]]] = OrderedDict()
        self._plock = threading.Lock()

    def get(self, name: str, ids: Iterable[str], view: LibView | None) -> dict[str, dict[str, Any]]:
        """Whole payloads of the points ``ids`` that exist (:meth:`Store.retrieve`), cached ones
        only where ``view`` (current; None: none is trusted) has their document's signature."""
        ids = list(ids)
        out: dict[str, dict[str, Any]] = {}
        missing: list[str] = []
        if view is not None:
            with self._plock:
                for i in ids:
                    hit = self._payloads.get((name, i))
                    if hit is not None and hit[0] is not None and view.sigs.get(hit[1].get("doc_id", "")) == hit[0]:
                        self._payloads.move_to_end((name, i))
                        out[i] = dict(hit[1])
                    else:
                        missing.append(i)
        else:
            missing = ids
        if missing:
            recs = self.store.retrieve(name, missing)
            for r in recs:
                out[r.id] = dict(r.payload)
            if view is not None:
                self.prefill(name, view, recs)
        return out

    def prefill(self, name: str, view: LibView, recs: list[Record]) -> None:
        """Cache the whole payloads of ``recs`` that belong to ``view``'s current versions (never a
        RESTRICTED one)."""
        if not self.capacity or not recs:
            return
        with self._plock:
            for r in recs:
                p = r.payload
                sig = view.sigs.get(p.get("doc_id", ""))
                if sig is None or sig[0] != p.get("version") or point_restricted(p):
                    continue
                self._payloads[(name, r.id)] = (sig, p)
                self._payloads.move_to_end((name, r.id))
            while len(self._payloads) > self.capacity:
                self._payloads.popitem(last=False)

    def drop(self, name: str, docs: set[str] | None = None) -> None:
        """Forget the payloads of library ``name`` (of ``docs`` only, if given)."""
        with self._plock:
            for key in [k for k, (_, p) in self._payloads.items()
                        if k[0] == name and (docs is None or p.get("doc_id") in docs)]:
                del self._payloads[key]

    def clear(self) -> None:
        with self._plock:
            self._payloads.clear()
