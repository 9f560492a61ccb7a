"""The pooling importer server of ``egopool serve`` (file_format.md §9; extra ``egopool[server]``).

Several collection PCs upload single-episode zips (``egopool upload``) into one store;
the server verifies each zip completely, then publishes the episode into the task of the
same name, merging ``info.json`` / ``stats.json`` with the local writer's own code.

Imports run one way: ``app`` (FastAPI routes, ``config``) -> ``importer`` (allocate, renumber, group
commit) -> ``verify`` / ``declarations`` / ``zipcheck`` / ``media_bounds`` / ``renumber`` -> ``store`` (tasks in
a :class:`~egopool.storage.Store`, a directory or ``s3://``, plus the local state) -> ``db``; the publish itself
is :mod:`egopool.publish` (claim, commit, merge, recovery: one algorithm on both stores, docs/decisions.md O26);
``receive`` (streaming multipart), ``tokens``, ``catalog`` and ``page`` serve ``app``; so do the curation modules: ``review`` (verdicts, CSRF), ``search`` (filters, keyset
paging), ``summary`` (task totals) and ``curation_page`` (task and episode pages, with
``static/``). Only ``app`` and ``receive`` need the extra's packages (FastAPI, python-multipart).
"""
