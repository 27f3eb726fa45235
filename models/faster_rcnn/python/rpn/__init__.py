"""py-faster-rcnn's ``rpn`` layers for pycaffe: put ``models/faster_rcnn/python`` on PYTHONPATH.

The published Faster R-CNN and R-FCN test nets name ``module: 'rpn.proposal_layer' layer:
'ProposalLayer'``; this package provides that module (and ``rpn.generate_anchors``) written on
numpy alone, without py-faster-rcnn, its ``fast_rcnn.config`` or pyyaml. The training layers
(anchor targets, proposal targets, the RoI data layer) are not here.
"""
