"""LSTM: a long short-term memory layer, unrolled into a net (Caffe's LSTMLayer).

For t = 1..T, with h_0 and c_0 zero (or the previous batch's final state, or exposed bottoms):

    gates_t = W_hc (cont_t * h_{t-1}) + W_xc x_t + b_c [+ W_xc_static x_static]
    (c_t, h_t) = LSTMUnit(c_{t-1}, gates_t, cont_t)

with the gates in Caffe's order (i, f, o, g) (see ``layers/lstm_unit.py``). The top is h
(T, N, num_output). Learnable blobs, in Caffe's order: W_xc (4 num_output, K), b_c
(4 num_output), [W_xc_static (4 num_output, K_static)], W_hc (4 num_output, num_output).
With ``expose_hidden`` the extra bottoms are h_0, c_0 and the extra tops h_T, c_T. See
``layers/recurrent.py`` for the unrolled net's conventions.
"""
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.recurrent import (RecurrentLayer, add_cont_scale, add_inner_product,
                                          add_input_transforms, add_layer, add_sum)


@register("LSTM")
class LSTMLayer(RecurrentLayer):
    """recurrent_param: num_output, weight_filler, bias_filler, debug_info, expose_hidden."""

    num_recurrent = 2
    static_transform = "W_xc_x_static"

    def recurrent_input_names(self):
        return ["h_0", "c_0"]

    def recurrent_output_names(self):
        return [f"h_{self.T}", "c_T"]

    def output_names(self):
        return ["h"]

    def fill_unrolled_net(self, net_param):
        p = self.param.recurrent_param
        gates, weights, biases = 4 * self.num_output, p.weight_filler, p.bias_filler
        states = add_layer(net_param, "Input", "", top=["c_0", "h_0"])
        for shape in self.recurrent_input_shapes():
            states.input_param.shape.add().dim.extend(shape)
        cont_slice, x_slice = add_input_transforms(net_param, "W_xc", "b_c", gates, weights,
                                                   biases, self.static_input)
        outputs = []
        for t in range(1, self.T + 1):
            cont_slice.top.append(f"cont_{t}")
            x_slice.top.append(f"W_xc_x_{t}")
            add_cont_scale(net_param, f"h_{t - 1}", f"cont_{t}", f"h_conted_{t - 1}")
            add_inner_product(net_param, f"transform_{t}", f"h_conted_{t - 1}",
                              f"W_hc_h_{t - 1}", ["W_hc"], gates, 2, weights)
            inputs = [f"W_hc_h_{t - 1}", f"W_xc_x_{t}"]
            if self.static_input:
                inputs.append("W_xc_x_static")
            add_sum(net_param, f"gate_input_{t}", inputs, f"gate_input_{t}")
            add_layer(net_param, "LSTMUnit", f"unit_{t}",
                      [f"c_{t - 1}", f"gate_input_{t}", f"cont_{t}"], [f"c_{t}", f"h_{t}"])
            outputs.append(f"h_{t}")
        add_layer(net_param, "Split", "", [f"c_{self.T}"], ["c_T"])
        add_layer(net_param, "Concat", "h_concat", outputs, ["h"]).concat_param.axis = 0
