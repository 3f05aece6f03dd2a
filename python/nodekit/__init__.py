"""The node toolkit: what a maintainer of the cluster image needs.

- :mod:`nodekit.render` renders ``cloud-init/templates/`` into the documents every node boots;
- :mod:`nodekit.rehearsal` boots those documents for real in local containers.

It works on a checkout of the repository (templates, rendered documents) and imports only the
shared parts of the client (:mod:`driver.layout`, :mod:`driver.errors`, :mod:`driver.procs`, ...:
the list is pyproject.toml's import contract ``shared``); the client never imports it.
"""
