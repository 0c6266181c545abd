"""Where the students' untrusted programs run: the jail (jail.py, with namespaces.py where bubblewrap is missing,
seccomp.py, cgroups.py, uids.py), what a run reports (outcomes.py) and a program run on a problem's test inputs
(cases.py). It imports nothing of the project outside this package; the method reaches it through cases.py."""
