"""What the detection layers of SSD's, Fast/Faster R-CNN's and R-FCN's Caffe forks share: box
geometry (boxes.py), and the code the layers, the solver's detection test and ``pycaffe test``
use together."""
