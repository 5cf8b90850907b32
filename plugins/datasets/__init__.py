"""The ``datasets`` plugin (:mod:`.plugin`): ``trm data build SOURCE --out DIR`` (:mod:`.data_cmd`),
a puzzle-dataset directory built by any data source a plugin registers, its options read from
the source's ``options_type``.
"""
