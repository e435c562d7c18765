# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""agree: do all apiservers report the same storage versions? A migration may only run once they do.

``agreement`` compares one observation (pure); ``wait`` polls until enough consecutive observations
agree.

Layer: the lowest capability, over the API layer and the shared files (``profiles``, ``resources``); it imports no
other capability. The order is tests/unit/test_package_layers.py.
"""
