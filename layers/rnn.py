"""RNN: a simple (Elman) recurrent layer, unrolled into a net (Caffe's RNNLayer).

For t = 1..T, with h_0 zero (or the previous batch's h_T, or an exposed bottom):

    h_t = tanh(W_hh (cont_t * h_{t-1}) + W_xh x_t + b_h [+ W_xh_static x_static])
    o_t = tanh(W_ho h_t + b_o)

The top is o (T, N, num_output). Learnable blobs, in Caffe's order: W_xh (num_output, K),
b_h, [W_xh_static (num_output, K_static)], W_hh (num_output, num_output), W_ho, b_o. See
``layers/recurrent.py`` for the bottoms, tops and the unrolled net's conventions.
"""
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.recurrent import (RecurrentLayer, add_cont_scale, add_inner_product,
                                          add_input_transforms, add_layer, add_sum)


@register("RNN")
class RNNLayer(RecurrentLayer):
    """recurrent_param: num_output, weight_filler, bias_filler, debug_info, expose_hidden."""

    num_recurrent = 1
    static_transform = "W_xh_x_static"

    def recurrent_input_names(self):
        return ["h_0"]

    def recurrent_output_names(self):
        return [f"h_{self.T}"]

    def output_names(self):
        return ["o"]

    def fill_unrolled_net(self, net_param):
        p = self.param.recurrent_param
        n, weights, biases = self.num_output, p.weight_filler, p.bias_filler
        states = add_layer(net_param, "Input", "", top=["h_0"])
        states.input_param.shape.add().dim.extend(self.recurrent_input_shapes()[0])
        cont_slice, x_slice = add_input_transforms(net_param, "W_xh", "b_h", n, weights, biases,
                                                   self.static_input)
        outputs = []
        for t in range(1, self.T + 1):
            cont_slice.top.append(f"cont_{t}")
            x_slice.top.append(f"W_xh_x_{t}")
            add_cont_scale(net_param, f"h_{t - 1}", f"cont_{t}", f"h_conted_{t - 1}")
            add_inner_product(net_param, f"W_hh_h_{t - 1}", f"h_conted_{t - 1}",
                              f"W_hh_h_{t - 1}", ["W_hh"], n, 2, weights)
            inputs = [f"W_hh_h_{t - 1}", f"W_xh_x_{t}"]
            if self.static_input:
                inputs.append("W_xh_x_static")
            add_sum(net_param, f"h_input_sum_{t}", inputs, f"h_neuron_input_{t}")
            add_layer(net_param, "TanH", f"h_neuron_{t}", [f"h_neuron_input_{t}"], [f"h_{t}"])
            add_inner_product(net_param, f"W_ho_h_{t}", f"h_{t}", f"W_ho_h_{t}",
                              ["W_ho", "b_o"], n, 2, weights, biases)
            add_layer(net_param, "TanH", f"o_neuron_{t}", [f"W_ho_h_{t}"], [f"o_{t}"])
            outputs.append(f"o_{t}")
        add_layer(net_param, "Concat", "o_concat", outputs, ["o"]).concat_param.axis = 0
