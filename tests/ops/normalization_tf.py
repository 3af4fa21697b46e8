# The TensorFlow numbers in normalization_cases.cpp: run with tensorflow-cpu in a venv
# (python normalization_tf.py); never part of the build or the tests.
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf
x = np.array([0.5, -1.0, 2.0, 1.5, 0.25, -0.75, -0.5, 0.5, 1.0, 3.0, -2.0, 0.0],
             np.float32).reshape(2, 2, 1, 3)
scale = np.array([1.5, 0.5, -1.0], np.float32)
offset = np.array([0.1, -0.2, 0.3], np.float32)
dy = np.array([1.0, -0.5, 0.25, 0.0, 2.0, -1.0, 0.5, 0.5, -0.25, 1.0, 0.0, -2.0],
              np.float32).reshape(2, 2, 1, 3)
mean = np.array([0.2, -0.1, 0.4], np.float32)
var = np.array([1.2, 0.8, 2.0], np.float32)
def show(name, t):
    print(name, repr(np.asarray(t).reshape(-1).tolist()))
for training in (True, False):
    xs, ss, os_ = tf.Variable(x), tf.Variable(scale), tf.Variable(offset)
    with tf.GradientTape() as tape:
        y, m, v = tf.compat.v1.nn.fused_batch_norm(
            xs, ss, os_, None if training else mean, None if training else var,
            epsilon=0.001, is_training=training)
        loss = tf.reduce_sum(y * dy)
    dx, dscale, doffset = tape.gradient(loss, [xs, ss, os_])
    tag = "training" if training else "inference"
    show(tag + " y", y); show(tag + " mean", m); show(tag + " variance", v)
    show(tag + " dx", dx); show(tag + " dscale", dscale); show(tag + " doffset", doffset)
x2 = x.reshape(4, 3)
ln = tf.keras.layers.LayerNormalization(epsilon=0.001)
ln.build((4, 3))
ln.gamma.assign(scale); ln.beta.assign(offset)
xv = tf.Variable(x2)
with tf.GradientTape() as tape:
    y = ln(xv)
    loss = tf.reduce_sum(y * dy.reshape(4, 3))
dx, dg, db = tape.gradient(loss, [xv, ln.gamma, ln.beta])
show("layer_norm y", y); show("layer_norm dx", dx); show("layer_norm dscale", dg)
show("layer_norm doffset", db)
print(tf.__version__)
