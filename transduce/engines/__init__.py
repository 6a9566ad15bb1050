"""The engines that can search behind `translate`, `evaluate` and `serve` (`--engine`):
transduce's own search, or CTranslate2's over the run's export. `engine.load` picks one."""

ENGINES = ("transduce", "ctranslate2")  # by the names --engine takes
