// Dynamic control flow benchmarks (`actorflow-bench --only control`): the
// cost of a while-loop iteration, beside TensorFlow's graph-mode while_loop
// when a Python with TensorFlow is at hand.
#pragma once
#include <optional>
#include <string>

namespace actorflow::bench {

/// Microseconds per iteration of a loop of `iterations` whose body adds 1 to a scalar.
double while_us_per_iteration(int iterations);
/// Microseconds per iteration of `iterations` of tanh(x @ w + 1) * 0.5 on 64x64 float32.
double while_us_per_iteration_4ops(int iterations);

/// What TensorFlow reference `script` (bench_util.hpp's reference_script:
/// a file of the reference directory, or a full path) prints when
/// $ACTORFLOW_TF_PYTHON (or a python3 that imports tensorflow) runs it with
/// `args`; nothing when the script or such a Python is not there, or it fails.
std::optional<std::string> run_tf_reference(const std::string& script, const std::string& args);
/// The Python that imports TensorFlow: $ACTORFLOW_TF_PYTHON, else python3 if it does.
std::optional<std::string> tensorflow_python();

struct tf_while_figures {
  double us_per_iteration;
  double us_per_iteration_4ops;
};
/// The reference tf_while.py (in bench::reference_dir()) run by
/// $ACTORFLOW_TF_PYTHON (or a python3 that imports tensorflow); nothing when
/// the script or such a Python is not there.
std::optional<tf_while_figures> tf_while_reference(int iterations);
/// TensorFlow's words/s over one epoch of the reference tf_lstm_lm.py
/// (sampled softmax; about a minute), run as tf_while_reference is.
std::optional<double> tf_lstm_lm_words_per_s();

}  // namespace actorflow::bench
