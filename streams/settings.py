"""Settings a faust app gives `binlake streams worker` beyond faust's own, read the way faust reads its
own: faust keeps every keyword of `faust.App(...)` and every attribute of a config object, known to
it or not, so an app sets the worker's options as it sets faust's."""

from __future__ import annotations

from typing import Any


def app_setting(app: Any, *names: str) -> Any:
    """The value the app gives the first of `names` it sets: in its options (`faust.App(..., name=...)`),
    its config object (`config_from_object`) or the environment (`NAME`, after the app's `env_prefix`);
    None if it sets none of them."""
    _, options = app._default_options
    given = dict(options)
    if app._config_source is not None:
        given.update(app._load_settings_from_source(app._config_source, silent=True))
    for name in names:
        if given.get(name) is not None:
            return given[name]
        if (value := app.conf.getenv(name.upper())) is not None:
            return value
    return None
