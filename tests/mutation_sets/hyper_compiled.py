"""Hyper-MAPPO's last layer in compiled graphs: the base layer's and the generator's products of one input as one
product over [W | G] (models/hyper.py, `_SharedInputProducts`)."""

H = "src/hypermappo/models/hyper.py"
IN_GRAPH = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[hyper-obs-micro-act-norm-weight-grad]"


def mutations(M):
    return [
        M("hyper_shared_product_generator_bias_ones", H,
          "gb if gb is not None else b.new_zeros(g.shape[1])",
          "gb if gb is not None else b.new_ones(g.shape[1])",
          (IN_GRAPH,),
          "the generator's product given a bias it does not have"),
        M("hyper_shared_product_split_shifted", H,
          "base, xg = both[:, :o], both[:, o:]",
          "base, xg = both[:, :o], torch.roll(both, 1, 1)[:, o:]",
          (IN_GRAPH,),
          "the generator's columns read one column off"),
    ]
