"""From a regression to the commit that caused it: `git bisect` driven by measured probes
(:mod:`.run`), each probe built and measured on a target into a stored run (:mod:`.probe`),
decided from its values alone (:mod:`.decide`), in a git tree (:mod:`.git`)."""
