# The TensorFlow numbers in sampled_softmax_cases.cpp: run with tensorflow-cpu in a venv
# (python sampled_softmax_tf.py); never part of the build or the tests.
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf
W = np.array([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6], [-0.7, 0.8, 0.9], [1.0, -1.1, 0.2],
              [0.3, 0.4, -0.5], [-0.6, 0.7, 0.8]], np.float32)
b = np.array([0.01, -0.02, 0.03, -0.04, 0.05, -0.06], np.float32)
x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-0.5, 0.5, 1.0]], np.float32)
labels = np.array([[1], [4], [0]], np.int64)
sampled = (tf.constant([4, 2, 5], tf.int64), tf.constant([[0.3], [0.2], [0.5]], tf.float32),
           tf.constant([0.2, 0.4, 0.1], tf.float32))
for hits in (True, False):
    l = tf.nn.sampled_softmax_loss(W, b, labels, x, 3, 6, num_true=1, sampled_values=sampled,
                                   remove_accidental_hits=hits)
    print("num_true=1 remove_accidental_hits=%s" % hits, repr(l.numpy().tolist()))
labels2 = np.array([[1, 3], [4, 0], [0, 0]], np.int64)
sampled2 = (tf.constant([4, 2, 5], tf.int64), tf.constant([[0.3, 0.6], [0.2, 0.5], [0.5, 0.5]], tf.float32),
            tf.constant([0.2, 0.4, 0.1], tf.float32))
l = tf.nn.sampled_softmax_loss(W, b, labels2, x, 3, 6, num_true=2, sampled_values=sampled2)
print("num_true=2", repr(l.numpy().tolist()))
s, t, e = tf.random.log_uniform_candidate_sampler(tf.constant([[0], [3], [9]], tf.int64), 1, 4, False, 10, seed=1)
print("non-unique range 10 num_sampled 4: true", t.numpy().tolist(), "sampled", s.numpy().tolist(), e.numpy().tolist())
s, t, e = tf.random.log_uniform_candidate_sampler(tf.constant([[0], [3], [9]], tf.int64), 1, 4, True, 10, seed=1)
print("unique range 10 num_sampled 4: true", t.numpy().tolist(), "sampled", s.numpy().tolist(), e.numpy().tolist())
print(tf.__version__)
