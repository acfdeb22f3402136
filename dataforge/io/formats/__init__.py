"""Input formats: one module per format, named in :mod:`dataforge.io.formats.registry`.

See :class:`dataforge.io.formats.base.InputFormat` for what a format decides.
"""
