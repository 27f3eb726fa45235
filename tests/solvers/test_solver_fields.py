"""Solver fields through ``pycaffe train``: each value Caffe CHECKs, or that would crash or
compute garbage, ends the run in one line naming the solver file, the field's line, the field
and its value; borderline values Caffe accepts still train."""
import pytest

from tests.cli.conftest import interactive_sigint, run_cli  # noqa: F401 (fixtures)

NET = """\
layer { name: "data" type: "DummyData" top: "x" top: "y"
  dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
                     data_filler { type: "gaussian" } data_filler { type: "constant" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }
"""
BASE = {"base_lr": "0.01", "lr_policy": '"fixed"', "max_iter": "1",
        "snapshot_after_train": "false"}
NET_FIELDS = ("net", "train_net", "net_param", "train_net_param")

# (solver lines, the refused line (its first occurrence; (line, n) for the n-th) or None when
# the field is not in the file, the start of what follows "pycaffe: error: <file>[:<line>]: ")
BAD = [
    # Adam (adam_solver.cpp divides by 1 - beta1^t and takes sqrt(1 - beta2^t))
    (['type: "Adam"', "momentum2: 2"], "momentum2: 2",
     "momentum2: 2: Adam's beta2 (momentum2) must lie in [0, 1)"),
    (['type: "Adam"', "momentum2: 1"], "momentum2: 1", "momentum2: 1: Adam's beta2"),
    (['type: "Adam"', "momentum2: -0.5"], "momentum2: -0.5", "momentum2: -0.5: Adam's beta2"),
    (['type: "Adam"', "momentum: 1"], "momentum: 1",
     "momentum: 1: Adam's beta1 (momentum) must lie in [0, 1)"),
    (['type: "Adam"', "momentum: -0.1"], "momentum: -0.1", "momentum: -0.1: Adam's beta1"),
    (['type: "Adam"', "delta: 0"], "delta: 0",
     "delta: 0: Adam divides by sqrt(v) + delta, so delta must be > 0"),
    (['type: "Adam"', "delta: -1e-8"], "delta: -1e-8", "delta: -1e-08: Adam divides"),
    # AdaGrad and RMSProp (sgd_solvers.hpp: CHECK_EQ(0, momentum), 0 <= rms_decay < 1)
    (['type: "AdaGrad"', "momentum: 0.9"], "momentum: 0.9",
     "momentum: 0.9: Momentum cannot be used with AdaGrad"),
    (['type: "AdaGrad"', "delta: 0"], "delta: 0",
     "delta: 0: AdaGrad divides by sqrt(h) + delta"),
    (['type: "RMSProp"', "momentum: 0.5"], "momentum: 0.5",
     "momentum: 0.5: Momentum cannot be used with RMSProp"),
    (['type: "RMSProp"', "rms_decay: 1"], "rms_decay: 1",
     "rms_decay: 1: RMSProp's rms_decay must lie in [0, 1)"),
    (['type: "RMSProp"', "rms_decay: -0.1"], "rms_decay: -0.1", "rms_decay: -0.1: RMSProp's"),
    (['type: "RMSProp"', "delta: -1"], "delta: -1", "delta: -1: RMSProp divides by"),
    # AdaDelta: 1 - momentum < 0 makes the history negative, delta 0 never moves
    (['type: "AdaDelta"', "momentum: 1.5"], "momentum: 1.5",
     "momentum: 1.5: AdaDelta's momentum (the histories' decay) must lie in [0, 1)"),
    (['type: "AdaDelta"', "delta: 0"], "delta: 0",
     "delta: 0: AdaDelta divides by the gradient history + delta"),
    # SGD and Nesterov: momentum >= 1 grows without bound
    (["momentum: 1"], "momentum: 1", "momentum: 1: SGD's momentum must lie in [0, 1)"),
    (["momentum: -0.5"], "momentum: -0.5", "momentum: -0.5: SGD's momentum"),
    (['type: "Nesterov"', "momentum: 1.2"], "momentum: 1.2", "momentum: 1.2: Nesterov's"),
    # the lr policies (sgd_solver.cpp GetLearningRate's CHECKs)
    (['lr_policy: "cosine"'], 'lr_policy: "cosine"',
     'lr_policy: "cosine": Unknown learning rate policy: "cosine" (known policies: exp, '
     "fixed, inv, multistep, plateau, poly, sigmoid, step)"),
    (['lr_policy: "step"', "gamma: 0.1"], None,
     'stepsize: 0: lr_policy "step" needs stepsize > 0'),
    (['lr_policy: "step"', "gamma: 0.1", "stepsize: -5"], "stepsize: -5",
     'stepsize: -5: lr_policy "step" needs stepsize > 0'),
    (['lr_policy: "step"', "gamma: -1", "stepsize: 5"], "gamma: -1",
     'gamma: -1: lr_policy "step" needs gamma >= 0'),
    (['lr_policy: "exp"', "gamma: -0.5"], "gamma: -0.5", 'gamma: -0.5: lr_policy "exp"'),
    (['lr_policy: "inv"', "gamma: -1", "power: 0.75"], "gamma: -1", 'gamma: -1: lr_policy "inv"'),
    (['lr_policy: "multistep"', "gamma: -1"], "gamma: -1",
     'gamma: -1: lr_policy "multistep" needs gamma >= 0'),
    (['lr_policy: "multistep"', "gamma: 0.1", "stepvalue: 5", "stepvalue: 3"], "stepvalue: 3",
     'stepvalue (entry 2): 3: lr_policy "multistep" needs strictly increasing stepvalue '
     "entries (the one before is 5)"),
    (['lr_policy: "multistep"', "gamma: 0.1", "stepvalue: 5", "stepvalue: 5"],
     ("stepvalue: 5", 2), "stepvalue (entry 2): 5: "),
    (['lr_policy: "sigmoid"', "gamma: 0.1"], None, 'stepsize: 0: lr_policy "sigmoid" needs'),
    (['lr_policy: "sigmoid"', "gamma: -0.1", "stepsize: 5"], "gamma: -0.1",
     'gamma: -0.1: lr_policy "sigmoid" needs gamma >= 0'),
    (['lr_policy: "poly"', "power: 1", "max_iter: 0"], "max_iter: 0",
     'max_iter: 0: lr_policy "poly" needs max_iter > 0 (it divides by it)'),
    # test nets (solver.cpp InitTestNets)
    (["test_iter: -1", "test_interval: 1"], "test_iter: -1",
     "test_iter: -1: test_iter must be >= 0 (the number of test batches)"),
    (["test_iter: 2", "test_iter: -3", "test_interval: 1"], "test_iter: -3",
     "test_iter (entry 2): -3: test_iter must be >= 0"),
    (["test_iter: 1"], None,
     "test_interval: 0: test_interval must be > 0 when there are test nets (1)"),
    (["test_iter: 1", "test_interval: -5"], "test_interval: -5", "test_interval: -5: "),
    (['train_net: "{net}"', 'test_net: "{net}"', "test_iter: 1", "test_iter: 1",
      "test_interval: 1"], "test_iter: 1",
     "test_iter: 2 entries: test_iter must be specified for each test network: one per "
     "test_net/test_net_param entry (1)"),
    (['train_net: "{net}"', 'test_net: "{net}"', "test_interval: 1"], None,
     "test_iter: 0 entries: test_iter must be specified for each test network"),
    (['test_net: "{net}"', 'test_net: "{net}"', "test_iter: 1", "test_interval: 1"],
     "test_iter: 1", "test_iter: 1 entry: test_iter must be specified for each test network: "
                     "one per test_net/test_net_param entry (2), plus one per extra value for "
                     "the generic net"),
    (["test_iter: 1", "test_iter: 1", "test_interval: 1", 'test_state { stage: "a" }'],
     'test_state { stage: "a" }',
     "test_state: 1 entry: test_state must be unspecified or specified once per test net (2)"),
    # the loop's own fields
    (["iter_size: 0"], "iter_size: 0", "iter_size: 0: iter_size must be >= 1"),
    (["average_loss: 0"], "average_loss: 0",
     "average_loss: 0: average_loss must be >= 1 (the number of iterations the "
     "displayed loss averages)"),
    (["max_iter: -1"], "max_iter: -1", "max_iter: -1: max_iter must be >= 0"),
    (["snapshot: -1"], "snapshot: -1", "snapshot: -1: snapshot must be >= 0 (0: never)"),
    (["display: -10"], "display: -10", "display: -10: display must be >= 0"),
    (["test_interval: -1"], "test_interval: -1", "test_interval: -1: test_interval must be"),
    # the update pipeline
    (['regularization_type: "L3"', "weight_decay: 0.1"], 'regularization_type: "L3"',
     'regularization_type: "L3": Unknown regularization type (known types: "L1", "L2")'),
    (['regularization_type: "l2"'], 'regularization_type: "l2"',
     'regularization_type: "l2": Unknown regularization type'),
    (["clip_gradients: 0"], "clip_gradients: 0",
     "clip_gradients: 0: clip_gradients must be the L2 norm to clip the gradients to (> 0), "
     "or negative (the default, -1) for no clipping (0 would scale every gradient to 0)"),
    (["clip_gradients: nan"], "clip_gradients: nan", "clip_gradients: nan: clip_gradients "),
    # numbers that are not numbers
    (["base_lr: nan"], "base_lr: nan", "base_lr: nan: must be a finite number"),
    (["base_lr: inf"], "base_lr: inf", "base_lr: inf: must be a finite number"),
    (["weight_decay: -inf"], "weight_decay: -inf", "weight_decay: -inf: must be a finite"),
    (["gamma: nan"], "gamma: nan", "gamma: nan: must be a finite number"),
    (['type: "Adam"', "delta: inf"], "delta: inf", "delta: inf: must be a finite number"),
    (['type: "Adam"', "momentum2: nan"], "momentum2: nan", "momentum2: nan: must be a finite"),
]

# Values Caffe accepts that must keep training (and the rule each pins).
GOOD = [
    ["momentum: 0"],
    ["momentum: 0.99"],
    ['type: "Nesterov"', "momentum: 0.95"],
    ['type: "Adam"', "momentum: 0", "momentum2: 0.999", "delta: 1e-8"],
    ['type: "Adam"', "momentum: 0.9", "momentum2: 0"],
    ['type: "Adam"'],                          # Caffe's defaults: momentum 0, momentum2 0.999
    ['type: "AdaGrad"', "delta: 1e-8"],
    ['type: "RMSProp"', "rms_decay: 0"],
    ['type: "RMSProp"', "rms_decay: 0.999"],
    ['type: "AdaDelta"', "momentum: 0.95", "delta: 1e-6"],
    ['type: "AdaDelta"', "momentum: 0"],
    ["delta: 0"],                              # SGD never reads delta
    ["clip_gradients: -1"], ["clip_gradients: 1e-3"], ["clip_gradients: inf"],
    ["clip_gradients: -inf"],
    ["base_lr: 0"], ["base_lr: -0.01"],       # Caffe ascends with a negative rate
    ["weight_decay: 0.0005", 'regularization_type: "L1"'],
    ["weight_decay: -0.0001"],                 # accepted by Caffe; finite
    ["max_iter: 0"],                           # snapshot the initial weights only
    ["display: 0", "snapshot: 0"],
    ["test_iter: 0", "test_interval: 1"],      # Caffe tests nothing and logs nan
    ["test_iter: 2", "test_iter: 1", "test_interval: 1"],   # the generic net tested twice
    ['test_net: "{net}"', "test_iter: 1", "test_iter: 1", "test_interval: 1"],
    ['train_net: "{net}"', 'test_net: "{net}"', "test_iter: 1", "test_interval: 1"],
    ["test_iter: 1", "test_iter: 1", "test_interval: 1", 'test_state { stage: "a" }',
     'test_state { stage: "b" }'],
    ["test_interval: 0"],                      # no test nets: never tested
    ["iter_size: 2", "average_loss: 10"],
    ['lr_policy: "step"', "gamma: 0", "stepsize: 1"],
    ['lr_policy: "exp"', "gamma: 1e30", "max_iter: 3"],   # lr inf, as Caffe (no crash)
    ['lr_policy: "inv"', "gamma: 0", "power: -3"],
    ['lr_policy: "multistep"', "gamma: 0.5", "stepvalue: -1", "stepvalue: 0", "stepvalue: 9"],
    ['lr_policy: "poly"', "power: -1", "max_iter: 2"],
    ['lr_policy: "sigmoid"', "gamma: 1", "stepsize: 1000"],   # exp(1000): lr 0, no crash
    ["stepvalue: 3", "stepvalue: 1"],          # read only by "multistep"
    ['type: "AdaGrad"', "rms_decay: 5"],       # read only by RMSProp
]


def write_solver(folder, lines):
    """A solver for the DummyData net: BASE's fields, each replaced by the same field in
    ``lines``, and ``net`` unless ``lines`` name the train net another way."""
    net = folder / "net.prototxt"
    net.write_text(NET)
    lines = [line.replace("{net}", str(net)) for line in lines]
    fields = {line.split(":")[0].split("{")[0].strip() for line in lines}
    text = [] if fields & set(NET_FIELDS) else [f'net: "{net}"']
    text += [f"{field}: {value}" for field, value in BASE.items() if field not in fields]
    path = folder / "solver.prototxt"
    path.write_text("\n".join(text + lines) + "\n")
    return path, text + lines


@pytest.mark.parametrize("lines, bad_line, message", BAD, ids=[" ".join(r[0]) for r in BAD])
def test_a_bad_value_is_one_line_naming_the_file_and_field(tmp_path, run_cli, lines, bad_line,
                                                           message):
    solver, written = write_solver(tmp_path, lines)
    result = run_cli("train", "--solver", solver)
    where = str(solver)
    if bad_line is not None:
        text, nth = bad_line if isinstance(bad_line, tuple) else (bad_line, 1)
        numbers = [number for number, line in enumerate(written, 1) if line == text]
        where += f":{numbers[nth - 1]}"
    assert result.code == 1 and "Traceback" not in result.err
    errors = result.error_lines()
    assert len(errors) == 1 and errors[0].startswith(f"pycaffe: error: {where}: {message}"), \
        errors


@pytest.mark.parametrize("lines", GOOD, ids=[" ".join(r) for r in GOOD])
def test_borderline_values_caffe_accepts_still_train(tmp_path, run_cli, lines):
    solver, _ = write_solver(tmp_path, lines)
    result = run_cli("train", "--solver", solver)
    assert result.code == 0, result.error_lines()
    assert "Optimization Done." in result.messages and not result.error_lines()
