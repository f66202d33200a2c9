"""An options config is one thing from collection to `apply`: the executable a collection
timed for a config (its fingerprint in the graph file) is the executable `apply` builds
from the chosen.json that names the same config."""

from graphcost.autotune import apply
from graphcost.autotune.chosen import CONFIG_FORMAT
from graphcost.xla.fingerprint import fingerprint
from graphcost.xla.options import OptionConfig
from graphcost.xla.prepare import prepare
from graphcost.xla.programs import make_program


def test_apply_builds_the_executable_the_collection_timed():
    name, fn, args = make_program("mlp", 0)
    prep = prepare(name, fn, args, "options", distinct=6)  # as `collect` compiles
    assert len(set(prep.fingerprints)) >= 3  # several executables, not one
    for features, stored in zip(prep.features, prep.fingerprints, strict=True):
        options = OptionConfig.from_features(features).compiler_options()
        config = {"format": CONFIG_FORMAT, "program": name, "kind": "options",
                  "arguments": None, "layouts": [], "compiler_options": options}
        exe = apply(fn, args, config).compiled
        assert fingerprint(exe.as_text(), options) == stored, options
