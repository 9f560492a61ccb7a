"""One publish algorithm over the :class:`~egopool.storage.Store` interface (docs/decisions.md U5, O11-O14, O26).

Used by the pooling server (a directory store or ``s3://``), ``egopool sync`` into a bucket and
``egopool stats recalc s3://``: claim N with the journal (:mod:`.journal`), put every object, the row with
``PutMode.CREATE`` is the commit, merge ``info.json`` / ``stats.json`` by compare-and-swap (:mod:`.task_meta`),
delete the journal (:mod:`.commit`); sweep what a killed publish left (:mod:`.recover`).
"""

from .commit import Pause, Publication, Record, claim_all, finish, publish_group, stamp_digests
from .journal import (JOURNALS, STALE_AFTER, claim, journal_doc, journal_key, journals, json_bytes, new_owner_id,
                      read_journal, task_hash)
from .recover import publication_of, recover
from .task_meta import committed_rows, committed_stats, create_task_meta, merge_meta, update_json

__all__ = ["JOURNALS", "STALE_AFTER", "Pause", "Publication", "Record", "claim", "claim_all", "committed_rows", "committed_stats",
           "create_task_meta", "finish", "journal_doc", "journal_key", "journals", "json_bytes", "merge_meta",
           "new_owner_id", "publication_of", "publish_group", "read_journal", "recover", "stamp_digests", "task_hash",
           "update_json"]
