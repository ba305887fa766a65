"""Mutations of the stag hunt's co-player view kernel (kernels/window_view.c)."""

C = "src/hypermappo/kernels/window_view.c"
T = "tests/test_window_view.py"
EQUAL = f"{T}::test_the_kernel_equals_the_composition"


def mutations(M):
    return [
        M("window_view_own_row_recentred", C, "const int keep = rel[b] == 0 || hunters[at] < 0.5f;",
          "const int keep = hunters[at] < 0.5f;", (EQUAL,), "the observer's own row is re-centred on the partner"),
        M("window_view_outside_edge", C, "const int out_r = ar < 0 || ar >= size;", "const int out_r = ar < 0 || ar > size;",
          (EQUAL,), "the row just past the grid's edge reads as inside"),
        M("window_view_prey_unmasked", C, "(rr >= 0 && rr < w && cc >= 0 && cc < w) ? src[rr * w + cc] : 0.0f",
          "(rr >= 0 && rr < w) ? src[rr * w + (cc < 0 ? 0 : cc >= w ? w - 1 : cc)] : 0.0f", (EQUAL,),
          "prey beyond the window's side edges are copied from its border"),
        M("window_view_id_rolled_out_of_sight", C, "const long id = (me_id + (keep ? 0 : rel[b])) % H;",
          "const long id = (me_id + rel[b]) % H;", (EQUAL,),
          "a partner out of sight: the observer's own window with the partner's id"),
    ]
