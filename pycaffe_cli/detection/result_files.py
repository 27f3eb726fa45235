"""The result files of SSD's DetectionOutput (save_output_param): VOC, ILSVRC and COCO
detections in image pixels, written as the fork writes them (see layers/detection_output.py)."""
import json
import math
import os

import numpy as np

from pycaffe_cli.detection.label_map import label_to_name, read_label_map
from pycaffe_cli.detection.pixels import output_boxes, read_name_sizes
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG


class ResultWriter:
    """The fork's result files (save_output_param): collects each image's detections in
    pixels and writes them out after every ``num_test_image`` images."""

    FORMATS = ("VOC", "COCO", "ILSVRC")

    def __init__(self, directory, prefix, output_format, names, sizes, num_test_image,
                 label_names, background_label_id, num_classes, resize_param):
        self.directory = directory
        self.prefix = prefix
        self.format = output_format
        self.names = names
        self.sizes = sizes
        self.num_test_image = num_test_image
        self.label_names = label_names
        self.background_label_id = background_label_id
        self.num_classes = num_classes
        self.resize_param = resize_param
        self.count = 0  # images seen since the files were last written
        self.detections = []  # (image name, label, score, [x, y, width, height])

    @classmethod
    def from_param(cls, param, num_classes, background_label_id):
        """A writer, or None where the fork writes nothing (no output_directory, or no
        label_map_file or name_size_file). The files named are read as the fork reads them,
        whether or not anything is written."""
        label_names = None
        if param.HasField("label_map_file"):
            if param.label_map_file:
                label_names = label_to_name(read_label_map(param.label_map_file),
                                            where=param.label_map_file)
            else:
                LOG.warning("Provide label_map_file if output results to files.")
        names, sizes = None, None
        if param.HasField("name_size_file"):
            if param.name_size_file:
                names, sizes = read_name_sizes(param.name_size_file)
            else:
                LOG.warning("Provide name_size_file if output results to files.")
        if not param.output_directory or label_names is None or names is None:
            return None
        if param.output_format not in cls.FORMATS:
            raise CaffeError(f'output_format must be "VOC", "COCO" or "ILSVRC", got '
                             f'"{param.output_format}"')
        num_test_image = (param.num_test_image if param.HasField("num_test_image")
                          else len(names))
        if not 0 < num_test_image <= len(names):
            raise CaffeError(f"num_test_image ({num_test_image}) must be between 1 and the "
                             f"{len(names)} images {param.name_size_file} lists")
        resize = param.resize_param if param.HasField("resize_param") else None
        if resize is not None and not (resize.height > 0 and resize.width > 0):
            raise CaffeError("resize_param needs a height and a width above 0")
        try:
            os.makedirs(param.output_directory, exist_ok=True)
        except OSError as error:
            raise CaffeError(f"cannot create output_directory {param.output_directory}: "
                             f"{error.strerror}") from None
        return cls(param.output_directory, param.output_name_prefix, param.output_format,
                   names, sizes, num_test_image, label_names, background_label_id,
                   num_classes, resize)

    def start(self):
        """At the start of a round of num_test_image images: empty the VOC files (the fork's
        Reshape does), so that an interrupted round leaves no stale results."""
        if self.count == 0 and self.format == "VOC":
            for label, class_name in self.label_names.items():
                if label != self.background_label_id:
                    _write_text(self._path(class_name + ".txt"), "")

    def add_batch(self, num, rows):
        """Record the detections of ``num`` images (top rows [image, label, score, box]);
        write the files whenever num_test_image images are in."""
        for i in range(num):
            mine = rows[rows[:, 0] == i]
            missing = sorted({int(label) for label in mine[:, 1]} - set(self.label_names))
            if missing:
                raise CaffeError(f"cannot find label {missing[0]} in the label map")
            name = self.names[self.count]
            height, width = self.sizes[self.count]
            for row in mine:
                [[xmin, ymin, xmax, ymax]], _ = output_boxes(row[3:7], height, width,
                                                             self.resize_param)
                box = [_round2(xmin), _round2(ymin), _round2(xmax - xmin), _round2(ymax - ymin)]
                self.detections.append((name, int(row[1]), float(row[2]), box))
            self.count += 1
            if self.count == self.num_test_image:
                self.write()
                self.count = 0
                self.detections = []

    def _path(self, suffix):
        return os.path.join(self.directory, self.prefix + suffix)

    def write(self):
        if self.format == "VOC":
            files = {self.label_names.get(c, ""): [] for c in range(self.num_classes)
                     if c != self.background_label_id}
            for name, label, score, box in self.detections:
                class_name = self.label_names[label]
                if class_name not in files:
                    LOG.warning("Cannot find %s", class_name)
                    continue
                files[class_name].append(f"{name} {_score(score)} {_box_text(box)}\n")
            for class_name, lines in files.items():
                _write_text(self._path(class_name + ".txt"), "".join(lines))
        elif self.format == "ILSVRC":
            _write_text(self._path(".txt"), "".join(
                f"{name} {label} {_score(score)} {_box_text(box)}\n"
                for name, label, score, box in self.detections))
        else:
            detections = [{"image_id": name, "category_id": self.label_names[label],
                           "bbox": box, "score": score}
                          for name, label, score, box in self.detections]
            _write_text(self._path(".json"), json.dumps({"detections": detections}, indent=2))


def _round2(value):
    """The fork's round(v * 100) / 100 (C's round: halves away from zero), as a float32."""
    scaled = float(np.float32(value) * np.float32(100))
    return float(np.float32(math.copysign(math.floor(abs(scaled) + 0.5), scaled) / 100.))


def _box_text(box):
    """``xmin ymin xmax ymax`` as the fork prints them: each of x, y, width, height truncated
    to an integer, then the corners added up."""
    x, y, w, h = (int(v) for v in box)
    return f"{x} {y} {x + w} {y + h}"


def _score(score):
    """A score as C++ streams print a float: 6 significant digits."""
    return "%g" % np.float32(score)


def _write_text(path, text):
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as error:
        raise CaffeError(f"cannot write {path}: {error.strerror}") from None
