"""An options config is one type (`xla.options.OptionConfig`): its features, compiler
options and name all derive from its choices, and a bad config is refused up front."""

import numpy as np
import pytest

from graphcost.autotune.tune import format_result
from graphcost.xla.options import OPTION_KNOBS, OptionConfig, sample_option_configs


def test_features_read_back_to_the_same_config():
    for choices in sample_option_configs(50, np.random.default_rng(0)):
        config = OptionConfig(choices)
        assert OptionConfig.from_features(config.features()) == config


def test_the_default_sets_no_option_and_its_features_are_the_knobs_first_codes():
    d = OptionConfig.default()
    assert d.choices == (0,) * len(OPTION_KNOBS) and d.compiler_options() == {}
    feat = d.features()
    assert list(feat[:len(OPTION_KNOBS)]) == [k.codes[0] for k in OPTION_KNOBS]
    assert feat.any() and feat[-1] == 0  # not all zeros: an option's own number is its code
    assert str(d) == "the default"


def test_compiler_options_and_name_come_from_the_choices():
    knobs = [k.name for k in OPTION_KNOBS]
    choices = [0] * len(knobs)
    choices[knobs.index("no_fusion")] = 1
    choices[knobs.index("no_parallel_task_assigner")] = 1
    choices[knobs.index("max_isa")] = 2
    c = OptionConfig(tuple(np.int64(x) for x in choices))  # numpy ints are taken as ints
    assert c.choices == tuple(choices) and all(type(x) is int for x in c.choices)
    assert c.compiler_options() == {"xla_cpu_max_isa": "AVX", "xla_disable_hlo_passes":
                                    "fusion,cpu-parallel-task-assigner"}
    assert str(c) == "no_fusion=True, no_parallel_task_assigner=True, max_isa='AVX'"
    assert c.features()[-1] == 3


@pytest.mark.parametrize("choices", [(0,) * (len(OPTION_KNOBS) - 1), (9,) + (0,) * 10,
                                     (-1,) + (0,) * 10])
def test_a_config_that_fits_no_knobs_is_refused(choices):
    with pytest.raises(ValueError, match="one choice per knob of"):
        OptionConfig(choices)


def test_an_unknown_feature_code_is_refused_naming_the_knob():
    feat = OptionConfig.default().features()
    feat[4] = 0.75  # prefer_vector_width's codes are 1, 0.5 and 2
    with pytest.raises(ValueError, match="feature 4 is 0.75, not a code of knob "
                                         "prefer_vector_width"):
        OptionConfig.from_features(feat)


def test_online_report_names_the_chosen_knobs():
    from graphcost.autotune.tune import AutotuneResult, Step

    chosen = [0] * len(OPTION_KNOBS)
    chosen[[k.name for k in OPTION_KNOBS].index("fast_math")] = 1
    r = AutotuneResult("p", "options", 2, "coordinate", ["coordinate"], {}, chosen, False,
                       [Step("coordinate", 1, chosen, 0.8, 0.8)], {"coordinate": chosen},
                       {"default": [1.0, 1.0], "coordinate": [0.8, 0.8]},
                       found={"coordinate": [1.25, 1.2, 1.3]},
                       speedup={"coordinate": [1.25, 1.2, 1.3]}, versus={})
    assert "chosen: fast_math=True, 1.250x [1.200, 1.300]" in format_result(r)
