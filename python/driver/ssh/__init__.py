"""SSH to the head (paramiko), one module per concern.

Why paramiko and not the ``ssh`` binary: the driver must work the same on a laptop without
OpenSSH's client configured, verify host keys with its own trust-on-first-use store, and forward
ports without leaving an ``ssh -L`` process behind. Everything a
:class:`~driver.ssh.session.SshSession` opens is closed by its ``close`` — connection, SFTP,
forwards and their threads — including after errors and Ctrl-C: a session is a context manager,
and so is every cluster that holds one.

- :mod:`~driver.ssh.options`: how to connect (key, timeouts, retries, known_hosts files);
- :mod:`~driver.ssh.trust`: which host key a head must have (the head's key must match
  ``~/.ssh/known_hosts`` or the driver's own; a head seen for the first time is trusted once,
  its fingerprint reported and stored, or refused with ``--strict-host-keys``; a key that
  differs from a stored one is always refused);
- :mod:`~driver.ssh.session`: the connection, its commands and SFTP;
- :mod:`~driver.ssh.watchdog`: declaring a silent head dead;
- :mod:`~driver.ssh.forward` and :mod:`~driver.ssh.terminal`: tunnels and ``ssh``'s terminal;
- :mod:`~driver.ssh.kept` (a command's side) and :mod:`~driver.ssh.keeper` (the process that
  holds it): one connection and Jobs API tunnel kept between commands, as OpenSSH's
  ControlPersist keeps a master connection.

Import from the modules: the package itself loads nothing, so a command that only talks to a
kept connection never loads paramiko.
"""
